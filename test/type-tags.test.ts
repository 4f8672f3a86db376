/**
 * The native entry points recognise their own objects: Event and Stream by type tag, a device
 * buffer by the native handle it holds (native/device/buffer_table.h). Anything else in a buffer
 * or event slot, including an object that only borrows the class's prototype or an object of
 * another wrapped class, fails with the argument's usual InvalidArgumentError and nothing is
 * enqueued; a released buffer, or its handle carried by another object, reads as released.
 */
import { describe, expect, it } from 'vitest';
import { Device, DeviceBuffer, loadNative } from '../src/runtime/device/device-index.js';
import { BUFFER_HANDLE, type NativeBufferHandle } from '../src/runtime/native.js';
import { thrown } from './helpers/refused.js';

const d0 = Device.get(0);

describe('type-tagged native arguments', () => {
  it('a buffer slot takes only a device Buffer: forged, foreign and primitive values are refused by name', () => {
    const s = d0.newStream();
    const ev = d0.newEvent();
    const buf = d0.alloc(64);
    const before = s.stats().enqueued;
    const notBuffers: Array<[string, unknown]> = [
      ['a forged Buffer (its prototype only)', Object.create(DeviceBuffer.prototype as object)],
      ['a Buffer built from JS around a fake handle', new DeviceBuffer({ id: buf.id } as unknown as NativeBufferHandle)],
      ['an object with a number for a handle', { [BUFFER_HANDLE]: 1, id: buf.id }],
      ['a Stream', s.native],
      ['an Event', ev.native],
      ['a plain object', { id: buf.id, size: 64 }],
      ['a number', 7],
      ['null', null],
    ];
    for (const [what, v] of notBuffers) {
      const e = thrown(() => s.native.copyD2D(v as never, 0, buf, 0, 16, 0));
      expect(e.message, what).toBe('Expected a device Buffer for dst.');
      expect(e.details, what).toMatchObject({ argument: 'dst' });
      // The second buffer slot names its own argument.
      expect(thrown(() => s.native.copyD2D(buf, 0, v as never, 0, 16, 0)).message, what).toBe('Expected a device Buffer for src.');
    }
    expect(s.stats().enqueued).toBe(before);
    buf.release();
    s.destroy();
  });

  it('a released Buffer, and its handle carried by another object, read as released', () => {
    const s = d0.newStream();
    const buf = d0.alloc(64);
    const id = buf.id;
    const handle = buf[BUFFER_HANDLE];
    buf.release();
    const e = thrown(() => s.native.fill(buf, 0, 4, 0, 1, 0, 0));
    expect(e.message).toBe(`Buffer ${id} passed as dst was already released. HINT: do not use a tensor after release().`);
    expect(e.details).toMatchObject({ argument: 'dst', buffer: id });
    // The next buffer takes the released one's native slot; the old handle must not reach it.
    const next = d0.alloc(64);
    const stolen = { [BUFFER_HANDLE]: handle, id: 7 };
    expect(thrown(() => s.native.fill(stolen as never, 0, 4, 0, 1, 0, 0)).message).toBe(
      'Buffer 7 passed as dst was already released. HINT: do not use a tensor after release().',
    );
    expect(() => s.native.fill(next, 0, 4, 0, 1, 0, 0)).not.toThrow();
    next.release();
    s.destroy();
  });

  it('an event slot takes only a device Event', () => {
    const native = loadNative();
    const s = d0.newStream();
    const buf = d0.alloc(64);
    for (const v of [Object.create(native.Event.prototype as object), buf, s.native, {}]) {
      const e = thrown(() => s.native.recordEvent(v as never, 0));
      expect(e.message).toBe('Expected a device Event for event.');
      expect(thrown(() => s.native.waitEvent(v as never, 0)).message).toBe('Expected a device Event for event.');
    }
    // A real Event passes the same slot.
    expect(() => s.native.recordEvent(d0.newEvent().native, 0)).not.toThrow();
    buf.release();
    s.destroy();
  });
});
