import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointFormatError, InvalidArgumentError } from '../src/runtime/errors.js';
import { MAX_HEADER_BYTES, SafetensorsFile, writeSafetensors, type TensorSource } from '../src/model/safetensors.js';
import { Checkpoint, INDEX_FILE, writeCheckpoint } from '../src/model/checkpoint.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-st-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let counter = 0;
const fresh = (name = 'f') => join(dir, `${name}-${counter++}.safetensors`);

function bytesOf(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 31 + seed * 17) & 0xff;
  return out;
}

/** A file built by hand from the spec, independent of our writer. */
function rawFile(header: unknown, data: Uint8Array, opts: { length?: bigint; pad?: number } = {}): string {
  const text = header instanceof Uint8Array ? header : Buffer.from(typeof header === 'string' ? header : JSON.stringify(header));
  const json = Buffer.concat([text, Buffer.from(' '.repeat(opts.pad ?? 0))]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(opts.length ?? BigInt(json.length));
  const path = fresh('raw');
  writeFileSync(path, Buffer.concat([len, json, data]));
  return path;
}

async function openError(path: string): Promise<CheckpointFormatError> {
  try {
    const f = await SafetensorsFile.open(path);
    await f.close();
  } catch (err) {
    expect(err).toBeInstanceOf(CheckpointFormatError);
    expect((err as CheckpointFormatError).code).toBe('ASCENT_CHECKPOINT_FORMAT');
    expect((err as Error).message).toContain(path);
    return err as CheckpointFormatError;
  }
  throw new Error(`expected ${path} to be rejected`);
}

const SAMPLE: TensorSource[] = [
  { name: 'f32', dtype: 'F32', shape: [2, 3], data: bytesOf(24, 1) },
  { name: 'bf16', dtype: 'BF16', shape: [5], data: bytesOf(10, 2) },
  { name: 'f16', dtype: 'F16', shape: [1, 1, 3], data: bytesOf(6, 3) },
  { name: 'i32', dtype: 'I32', shape: [3], data: bytesOf(12, 4) },
  { name: 'i64', dtype: 'I64', shape: [2], data: bytesOf(16, 5) },
  { name: 'u8', dtype: 'U8', shape: [7], data: bytesOf(7, 6) },
  { name: 'i8', dtype: 'I8', shape: [1], data: bytesOf(1, 7) },
  { name: 'bool', dtype: 'BOOL', shape: [2], data: new Uint8Array([0, 1]) },
  { name: 'scalar', dtype: 'F32', shape: [], data: bytesOf(4, 8) },
  { name: 'empty', dtype: 'F32', shape: [0, 3], data: new Uint8Array(0) },
];

describe('single file', () => {
  it('writes and reads back every dtype, scalars and empty tensors, with metadata', async () => {
    const path = fresh();
    const { bytes } = await writeSafetensors(path, SAMPLE, { metadata: { format: 'pt' } });
    const raw = readFileSync(path);
    expect(raw.length).toBe(bytes);
    const headerLen = Number(raw.readBigUInt64LE(0));
    expect((8 + headerLen) % 8).toBe(0); // data section 8-byte aligned, as the reference writer does
    expect(JSON.parse(raw.subarray(8, 8 + headerLen).toString()).__metadata__).toEqual({ format: 'pt' });

    const f = await SafetensorsFile.open(path);
    expect(f.metadata).toEqual({ format: 'pt' });
    expect(f.tensors.map((t) => t.name)).toEqual(SAMPLE.map((t) => t.name));
    for (const t of SAMPLE) {
      expect(f.info(t.name)).toMatchObject({ dtype: t.dtype, shape: t.shape });
      expect(await f.read(t.name)).toEqual(t.data);
    }
    const seen: string[] = [];
    for await (const [info, data] of f) {
      seen.push(info.name);
      expect(data.length).toBe(info.end - info.begin);
    }
    expect(seen.sort()).toEqual(SAMPLE.map((t) => t.name).sort());
    expect(() => f.info('nope')).toThrow(InvalidArgumentError);
    await f.close();
  });

  it('reads a hand-made file (offsets out of header order, padded header)', async () => {
    const data = new Uint8Array(new Float32Array([1, 2, 3]).buffer);
    const path = rawFile({ b: { dtype: 'F32', shape: [1], data_offsets: [8, 12] }, a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } }, data, { pad: 5 });
    const f = await SafetensorsFile.open(path);
    expect(Array.from(new Float32Array((await f.read('a')).buffer))).toEqual([1, 2]);
    expect(Array.from(new Float32Array((await f.read('b')).buffer))).toEqual([3]);
    const order: string[] = [];
    for await (const [info] of f.entries()) order.push(info.name);
    expect(order).toEqual(['a', 'b']); // file order
    await f.close();
  });

  it('a "__proto__" metadata key stays data', async () => {
    const f = await SafetensorsFile.open(rawFile('{"__metadata__":{"__proto__":"x"}}', new Uint8Array(0)));
    // A null prototype: neither "__proto__" nor "toString" can reach Object.prototype.
    expect(Object.getPrototypeOf(f.metadata)).toBe(null);
    expect(Object.keys(f.metadata)).toEqual(['__proto__']);
    expect(f.metadata['__proto__']).toBe('x');
    expect(f.metadata['toString']).toBeUndefined();
    await f.close();
  });
});

describe('malformed files are CheckpointFormatErrors naming the file and tensor', () => {
  const ok = { dtype: 'F32', shape: [2], data_offsets: [0, 8] };
  const d8 = new Uint8Array(8);

  it('truncated before the header length', async () => {
    const path = fresh();
    writeFileSync(path, Buffer.from([1, 0, 0]));
    expect((await openError(path)).message).toMatch(/file is 3 bytes; a safetensors file starts with an 8-byte header length/);
  });

  it('header length absurd or past the end of the file', async () => {
    expect((await openError(rawFile({ x: ok }, d8, { length: 1n << 60n }))).message).toMatch(
      /header length 1152921504606846976 exceeds the 100000000-byte limit/,
    );
    expect((await openError(rawFile({ x: ok }, d8, { length: BigInt(MAX_HEADER_BYTES) }))).message).toMatch(
      /is larger than the \d+ bytes after the length field/,
    );
  });

  it('bad JSON, bad UTF-8, not an object', async () => {
    expect((await openError(rawFile('{"x":', new Uint8Array(0)))).message).toMatch(/header is not valid JSON: unexpected end of JSON at character 5/);
    const bad = Buffer.from('{"\xff":1}', 'latin1');
    expect((await openError(rawFile(bad, new Uint8Array(0)))).message).toMatch(/header is not valid UTF-8/);
    expect((await openError(rawFile('[1,2]', new Uint8Array(0)))).message).toMatch(/header is an array of length 2; expected a JSON object/);
    expect((await openError(rawFile('{"__metadata__":{"a":1}}', new Uint8Array(0)))).message).toMatch(
      /__metadata__\["a"\] is 1 of type number; expected a string/,
    );
  });

  it('unknown dtype, bad shape, bad offsets, unknown key', async () => {
    expect((await openError(rawFile({ x: { ...ok, dtype: 'F8' } }, d8))).message).toMatch(
      /tensor "x": dtype is 'F8' of type string; expected one of F32, BF16/,
    );
    expect((await openError(rawFile({ x: { ...ok, shape: [-2] } }, d8))).message).toMatch(
      /tensor "x": shape is \[-2\]; expected a list of non-negative integers/,
    );
    expect((await openError(rawFile({ x: { ...ok, shape: [2.5] } }, d8))).message).toMatch(/shape is \[2\.5\]/);
    expect((await openError(rawFile({ x: { ...ok, shape: 2 } }, d8))).message).toMatch(/shape is 2;/);
    expect((await openError(rawFile({ x: { ...ok, data_offsets: [0] } }, d8))).message).toMatch(/data_offsets is \[0\]; expected \[begin, end\]/);
    expect((await openError(rawFile({ x: { ...ok, data_offsets: [8, 0] } }, d8))).message).toMatch(/end before they begin/);
    expect((await openError(rawFile({ x: { ...ok, data_offsets: [0, 16], shape: [4] } }, d8))).message).toMatch(
      /tensor "x": data_offsets \[0, 16\] run past the data section \(8 bytes\)/,
    );
    expect((await openError(rawFile({ x: { ...ok, data_offset: [0, 8] } }, d8))).message).toMatch(/unknown key "data_offset"/);
    expect((await openError(rawFile({ x: { dtype: 'F32', shape: [2] } }, d8))).message).toMatch(/data_offsets is missing/);
  });

  it('byte length differs from numel × dtype size (incl. overflowing shapes)', async () => {
    expect((await openError(rawFile({ x: { ...ok, shape: [3] } }, d8))).message).toMatch(
      /tensor "x": data_offsets \[0, 8\] hold 8 bytes but F32 × \[3\] needs 12 bytes/,
    );
    expect((await openError(rawFile({ x: { ...ok, shape: [2 ** 40, 2 ** 40] } }, d8))).message).toMatch(
      /hold 8 bytes but F32 × \[1099511627776, 1099511627776\] needs 4835703278458516698824704 bytes/,
    );
  });

  it('overlap, gap and trailing bytes', async () => {
    const d16 = new Uint8Array(16);
    const a = { dtype: 'F32', shape: [2], data_offsets: [0, 8] };
    expect(
      (await openError(rawFile({ a, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] }, c: { dtype: 'F32', shape: [1], data_offsets: [12, 16] } }, d16)))
        .message,
    ).toMatch(/tensor "b": bytes \[4, 12\) overlap tensor "a" \[0, 8\)/);
    expect((await openError(rawFile({ a, b: { dtype: 'F32', shape: [1], data_offsets: [12, 16] } }, d16))).message).toMatch(
      /tensor "b": starts at byte 12 but the previous tensor "a" ends at 8: a gap of 4 bytes/,
    );
    expect((await openError(rawFile({ a: { dtype: 'F32', shape: [1], data_offsets: [4, 8] } }, d8))).message).toMatch(
      /tensor "a": starts at byte 4 .* gap of 4 bytes/,
    );
    expect((await openError(rawFile({ a }, d16))).message).toMatch(/data section is 16 bytes but the tensors cover only \[0, 8\); 8 trailing bytes/);
  });

  it('duplicate names are detected, not last-wins', async () => {
    const header =
      '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}, "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a" :{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}';
    expect((await openError(rawFile(header, d8))).message).toMatch(/tensor "a": appears twice in the header/);
    // Nested keys with the same name are not duplicates.
    const f = await SafetensorsFile.open(rawFile('{"__metadata__":{"a":"1"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', d8));
    expect(f.tensors.map((t) => t.name)).toEqual(['a']);
    await f.close();
  });

  it('a missing file', async () => {
    expect((await openError(join(dir, 'missing.safetensors'))).message).toMatch(/cannot open \(ENOENT\)/);
  });
});

describe('atomic write', () => {
  it('an error mid-write leaves the previous file and no temporary file', async () => {
    const path = fresh('atomic');
    await writeSafetensors(path, SAMPLE);
    const before = readFileSync(path);
    const failing: TensorSource[] = [
      SAMPLE[0],
      {
        name: 'b',
        dtype: 'F32',
        shape: [4],
        data: () => {
          throw new Error('source died');
        },
      },
    ];
    await expect(writeSafetensors(path, failing)).rejects.toThrow('source died');
    await expect(writeSafetensors(path, [{ name: 'b', dtype: 'F32', shape: [4], data: new Uint8Array(15) }])).rejects.toThrow(
      /needs 16 bytes but its data is 15 bytes/,
    );
    expect(readFileSync(path).equals(before)).toBe(true);
    expect(readdirSync(dir).filter((n) => n.includes('.tmp-'))).toEqual([]);
  });

  it('bad arguments are rejected before the file is touched', async () => {
    const path = fresh('args');
    await expect(writeSafetensors(path, [SAMPLE[0], SAMPLE[0]])).rejects.toThrow(/"f32" is given twice/);
    await expect(writeSafetensors(path, [{ ...SAMPLE[0], dtype: 'F8' as never }])).rejects.toThrow(/Expected one of F32.* but received 'F8'/);
    await expect(writeSafetensors(path, [{ ...SAMPLE[0], name: '__metadata__' }])).rejects.toThrow(InvalidArgumentError);
    expect(readdirSync(dir).filter((n) => n.startsWith('args') || n.includes('.tmp-'))).toEqual([]);
  });

  it('a process killed mid-write leaves the previous file intact', async () => {
    const path = fresh('crash');
    await writeSafetensors(path, SAMPLE);
    const before = readFileSync(path);
    const r = spawnSync(process.execPath, ['test/fixtures/safetensors-crash.mjs', path], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(9);
    expect(readFileSync(path).equals(before)).toBe(true);
    // The half-written temporary file exists (nobody cleaned up) but is not the checkpoint.
    expect(readdirSync(dir).some((n) => n.startsWith(`.${path.split('/').pop()}.tmp-`))).toBe(true);
    const f = await SafetensorsFile.open(path);
    expect(f.tensors.length).toBe(SAMPLE.length);
    await f.close();
  });
});

describe('sharded checkpoints', () => {
  const tensors: TensorSource[] = Array.from({ length: 7 }, (_, i) => ({
    name: `layer.${i}.w`,
    dtype: 'F32' as const,
    shape: [i + 1, 4],
    data: bytesOf(16 * (i + 1), i),
  }));
  const total = tensors.reduce((s, t) => s + (t.data as Uint8Array).length, 0);

  it('splits by max shard size, writes the index, reads back through folder and index path', async () => {
    const out = mkdtempSync(join(dir, 'sharded-'));
    const { files, totalSize } = await writeCheckpoint(out, tensors, { maxShardBytes: 100, metadata: { format: 'pt' } });
    expect(totalSize).toBe(total);
    expect(files.length).toBeGreaterThan(2);
    expect(files[0]).toBe(`model-00001-of-${String(files.length).padStart(5, '0')}.safetensors`);
    const index = JSON.parse(readFileSync(join(out, INDEX_FILE), 'utf8'));
    expect(index.metadata.total_size).toBe(total);
    expect(Object.keys(index.weight_map)).toEqual(tensors.map((t) => t.name));
    // Every shard is <= 100 bytes of tensors unless a single tensor is bigger.
    for (const f of files) {
      const s = await SafetensorsFile.open(join(out, f));
      const bytes = s.tensors.reduce((a, t) => a + t.end - t.begin, 0);
      expect(bytes <= 100 || s.tensors.length === 1).toBe(true);
      await s.close();
    }
    for (const path of [out, join(out, INDEX_FILE)]) {
      const ck = await Checkpoint.open(path);
      expect(ck.shards.length).toBe(files.length);
      expect(ck.warnings).toEqual([]);
      expect(ck.tensors.map((t) => t.name)).toEqual(tensors.map((t) => t.name));
      for (const t of tensors) expect(await ck.read(t.name)).toEqual(t.data);
      let n = 0;
      for await (const [info, data] of ck) {
        expect(data).toEqual(tensors.find((t) => t.name === info.name)!.data);
        n++;
      }
      expect(n).toBe(tensors.length);
      await ck.close();
    }
  });

  it('re-saving with another shard count removes the stale shards and index', async () => {
    const out = mkdtempSync(join(dir, 'resave-'));
    await writeCheckpoint(out, tensors, { maxShardBytes: 100 });
    await writeCheckpoint(out, tensors, { maxShardBytes: 1 << 20 });
    expect(readdirSync(out)).toEqual(['model.safetensors']);
    const ck = await Checkpoint.open(out);
    expect(ck.index).toBeUndefined();
    expect(ck.tensors.length).toBe(tensors.length);
    await ck.close();
  });

  // 16 + 32 + 48 | 64 | 80 | 96 | 112 bytes with at most 100 per shard: five shards.
  const s1 = 'model-00001-of-00005.safetensors';
  const s2 = 'model-00002-of-00005.safetensors';

  async function indexError(mutate: (index: { metadata: Record<string, unknown>; weight_map: Record<string, string> }, out: string) => void): Promise<string> {
    const out = mkdtempSync(join(dir, 'bad-index-'));
    expect((await writeCheckpoint(out, tensors, { maxShardBytes: 100 })).files).toEqual([
      s1,
      s2,
      ...[3, 4, 5].map((i) => `model-0000${i}-of-00005.safetensors`),
    ]);
    const index = JSON.parse(readFileSync(join(out, INDEX_FILE), 'utf8'));
    mutate(index, out);
    writeFileSync(join(out, INDEX_FILE), JSON.stringify(index));
    try {
      await (await Checkpoint.open(out)).close();
    } catch (err) {
      expect(err).toBeInstanceOf(CheckpointFormatError);
      return (err as Error).message;
    }
    throw new Error('expected the index to be rejected');
  }

  it('index errors: missing shard, tensor not in its shard, unlisted tensor, path traversal, bad total_size', async () => {
    expect(await indexError((_, out) => rmSync(join(out, s2)))).toMatch(
      /shard "model-00002-of-00005.safetensors" is missing from .* but the weight_map puts 1 tensor in it \(e.g. "layer.3.w"\)/,
    );
    expect(
      await indexError((ix) => {
        ix.weight_map['ghost.weight'] = s1;
      }),
    ).toMatch(/weight_map puts tensor "ghost.weight" in "model-00001-of-00005.safetensors", but that shard has no such tensor/);
    expect(
      await indexError((ix) => {
        ix.weight_map['layer.0.w'] = s2;
      }),
    ).toMatch(
      /model-00001-of-00005.safetensors: tensor "layer.0.w" is also in this shard, but the weight_map .* puts it in "model-00002-of-00005.safetensors"/,
    );
    expect(
      await indexError((ix) => {
        delete ix.weight_map['layer.0.w'];
      }),
    ).toMatch(/tensor "layer.0.w" is not in the weight_map/);
    expect(
      await indexError((ix) => {
        ix.weight_map['layer.0.w'] = '../x.safetensors';
      }),
    ).toMatch(/expected a file name inside the checkpoint folder/);
    expect(
      await indexError((ix) => {
        ix.metadata.total_size = -1;
      }),
    ).toMatch(/total_size is -1 of type number/);
    expect(
      await indexError((ix) => {
        delete (ix as Record<string, unknown>).weight_map;
      }),
    ).toMatch(/"weight_map" is missing/);
  });

  it('an unreadable or oversized index is a CheckpointFormatError', async () => {
    const out = mkdtempSync(join(dir, 'idx-'));
    writeFileSync(join(out, INDEX_FILE), '{"weight_map": ');
    await expect(Checkpoint.open(out)).rejects.toThrow(/model.safetensors.index.json: cannot read the shard index \(.*JSON/);
    writeFileSync(join(out, INDEX_FILE), '');
    truncateSync(join(out, INDEX_FILE), 200_000_000); // sparse: no disk used
    await expect(Checkpoint.open(out)).rejects.toThrow(/cannot read the shard index \(it is 200000000 bytes, more than the 100000000-byte limit\)/);
  });

  it('a total_size that disagrees is a warning, not an error', async () => {
    const out = mkdtempSync(join(dir, 'warn-'));
    await writeCheckpoint(out, tensors, { maxShardBytes: 100 });
    const index = JSON.parse(readFileSync(join(out, INDEX_FILE), 'utf8'));
    index.metadata.total_size = 5;
    writeFileSync(join(out, INDEX_FILE), JSON.stringify(index));
    const ck = await Checkpoint.open(out);
    expect(ck.warnings).toEqual([expect.stringMatching(/total_size is 5 but the tensors hold \d+ bytes/)]);
    await ck.close();
  });

  it('a folder without a checkpoint lists what it found', async () => {
    const out = mkdtempSync(join(dir, 'empty-'));
    writeFileSync(join(out, 'other.safetensors'), '');
    await expect(Checkpoint.open(out)).rejects.toThrow(/no model.safetensors.index.json or model.safetensors in this folder \(found: other.safetensors\)/);
  });
});
