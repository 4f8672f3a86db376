/**
 * Fuzz: mutated headers of a valid safetensors file (seeded, so a failure reproduces).
 * Property: every outcome is either a valid parse whose tensors all lie inside the file and read
 * back at exactly their size, or a CheckpointFormatError — never another error, a hang or a crash.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointFormatError } from '../src/runtime/errors.js';
import { SafetensorsFile, writeSafetensors, type TensorSource } from '../src/model/safetensors.js';
import { Prng } from '../src/model/prng.js';

const ITERATIONS = 1500;
let dir: string;
let base: Buffer;
let headerLen: number;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-fuzz-'));
  const tensors: TensorSource[] = [
    { name: 'model.embed_tokens.weight', dtype: 'F32', shape: [4, 3], data: new Uint8Array(48).fill(1) },
    { name: 'model.norm.weight', dtype: 'BF16', shape: [3], data: new Uint8Array(6).fill(2) },
    { name: 'ids', dtype: 'I64', shape: [2], data: new Uint8Array(16).fill(3) },
    { name: 'mask', dtype: 'BOOL', shape: [1, 5], data: new Uint8Array(5).fill(1) },
    { name: 'empty', dtype: 'F16', shape: [0], data: new Uint8Array(0) },
    { name: 'scalar', dtype: 'I32', shape: [], data: new Uint8Array(4).fill(4) },
  ];
  const path = join(dir, 'base.safetensors');
  await writeSafetensors(path, tensors, { metadata: { format: 'pt' } });
  base = readFileSync(path);
  headerLen = Number(base.readBigUInt64LE(0));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const WEIRD_NUMBERS: unknown[] = [-1, 0, 1, 2, 3, 7, 8, 1.5, 2 ** 31, 2 ** 32 + 4, 2 ** 53, 2 ** 64, 1e308, -0, '4', null, true, [], {}];
const DTYPES: unknown[] = ['F32', 'BF16', 'F16', 'I32', 'I64', 'U8', 'I8', 'BOOL', 'F64', 'f32', '', 7, null];

function withLength(json: Buffer, data: Buffer, length: bigint = BigInt(json.length)): Buffer {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(length);
  return Buffer.concat([len, json, data]);
}

/** One mutated file; `kind` picks the family of mutation. */
function mutate(rng: Prng, kind: number): Buffer {
  const data = base.subarray(8 + headerLen);
  switch (kind) {
    case 0: { // random byte flips inside the header (and sometimes the length field)
      const out = Buffer.from(base);
      const flips = rng.int(1, 4);
      for (let i = 0; i < flips; i++) {
        const at = rng.next() < 0.1 ? rng.int(0, 7) : rng.int(8, 8 + headerLen - 1);
        out[at] = rng.next() < 0.5 ? out[at] ^ (1 << rng.int(0, 7)) : rng.int(0, 255);
      }
      return out;
    }
    case 1: // truncation anywhere
      return base.subarray(0, rng.int(0, base.length - 1));
    case 2: { // structured JSON edits of offsets / shapes / dtypes / entries
      const header = JSON.parse(base.subarray(8, 8 + headerLen).toString()) as Record<string, Record<string, unknown>>;
      const names = Object.keys(header).filter((n) => n !== '__metadata__');
      const edits = rng.int(1, 3);
      for (let e = 0; e < edits; e++) {
        const t = header[rng.pick(names)];
        const what = rng.int(0, 9);
        // An earlier edit may have replaced the entry or its fields; edit only what is still there.
        if (typeof t !== 'object' || t === null || Array.isArray(t)) continue;
        const offs = Array.isArray(t.data_offsets) ? (t.data_offsets as unknown[]) : undefined;
        const shape = Array.isArray(t.shape) ? (t.shape as unknown[]) : undefined;
        if (what === 0) t.dtype = rng.pick(DTYPES);
        else if (what === 1 && offs) offs[rng.int(0, 1)] = rng.pick(WEIRD_NUMBERS);
        else if (what === 2 && offs) t.data_offsets = offs.map((v) => (typeof v === 'number' ? v + rng.int(-8, 8) : v));
        else if (what === 3 && shape) shape.push(rng.pick(WEIRD_NUMBERS));
        else if (what === 4 && shape) shape.pop();
        else if (what === 5 && shape?.length) shape[0] = rng.pick(WEIRD_NUMBERS);
        else if (what === 6) delete t[rng.pick(['dtype', 'shape', 'data_offsets'])];
        else if (what === 7) t[rng.pick(['shape', 'data_offsets'])] = rng.pick(WEIRD_NUMBERS);
        else if (what === 8) header[`${rng.pick(names)}`] = rng.pick([1, 'x', [], null, { ...t }]) as never;
        else header.__metadata__ = rng.pick([{ a: 1 }, [], 'x', { ok: 'y' }]) as never;
      }
      let json = JSON.stringify(header);
      if (rng.next() < 0.15) { // duplicate a key textually (JSON.parse would keep the last)
        const n = rng.pick(names);
        json = json.replace(/}$/, `,${JSON.stringify(n)}:${JSON.stringify(header[n] ?? {})}}`);
      }
      const extra = rng.next() < 0.2 ? rng.int(-16, 16) : 0;
      const d = extra >= 0 ? Buffer.concat([data, Buffer.alloc(extra, 9)]) : data.subarray(0, data.length + extra);
      return withLength(Buffer.from(json), d);
    }
    case 3: { // the length field: random, off by a little, or huge
      const r = rng.int(0, 3);
      const len = r === 0 ? BigInt(headerLen + rng.int(-8, 8)) : r === 1 ? BigInt(rng.nextU32()) : r === 2 ? (BigInt(rng.nextU32()) << 32n) | BigInt(rng.nextU32()) : 0n;
      const out = Buffer.from(base);
      out.writeBigUInt64LE(len < 0n ? 0n : len, 0);
      return out;
    }
    default: { // whole header replaced by a random JSON-ish string
      const pieces = ['{', '}', '[', ']', '"a"', ':', ',', '1', '"F32"', '"shape"', '"data_offsets"', '"dtype"', ' ', '-', 'e9'];
      let s = '';
      const n = rng.int(0, 30);
      for (let i = 0; i < n; i++) s += rng.pick(pieces);
      return withLength(Buffer.from(s), data);
    }
  }
}

describe('safetensors header fuzz', () => {
  it(`${ITERATIONS} mutated files: a valid in-bounds parse or a CheckpointFormatError, nothing else`, async () => {
    const rng = new Prng(20240611);
    const path = join(dir, 'mutant.safetensors');
    const outcomes = { valid: 0, rejected: 0 };
    const kinds = new Map<number, { valid: number; rejected: number }>();
    for (let i = 0; i < ITERATIONS; i++) {
      const kind = i % 5;
      const bytes = mutate(rng, kind);
      writeFileSync(path, bytes);
      let f: SafetensorsFile | undefined;
      const k = kinds.get(kind) ?? { valid: 0, rejected: 0 };
      kinds.set(kind, k);
      try {
        f = await SafetensorsFile.open(path);
        const dataLength = bytes.length - f.dataStart;
        let covered = 0;
        for (const t of f.tensors) {
          expect(t.begin, `iteration ${i} ${t.name}`).toBeGreaterThanOrEqual(0);
          expect(t.end, `iteration ${i} ${t.name}`).toBeLessThanOrEqual(dataLength);
          const got = await f.read(t.name);
          expect(got.length).toBe(t.end - t.begin);
          expect(Buffer.from(got).equals(bytes.subarray(f.dataStart + t.begin, f.dataStart + t.end))).toBe(true);
          covered += got.length;
        }
        expect(covered, `iteration ${i}`).toBe(dataLength);
        outcomes.valid++;
        k.valid++;
      } catch (err) {
        if (!(err instanceof CheckpointFormatError)) {
          throw new Error(`iteration ${i} (kind ${kind}) raised ${(err as Error)?.constructor?.name}: ${(err as Error)?.message}\nfile (base64): ${bytes.toString('base64')}`);
        }
        expect(err.message).toContain(path);
        outcomes.rejected++;
        k.rejected++;
      } finally {
        await f?.close();
      }
    }
    expect(outcomes.valid + outcomes.rejected).toBe(ITERATIONS);
    // The fuzzer must exercise both sides, and each family must get rejected at least sometimes.
    expect(outcomes.valid).toBeGreaterThan(0);
    for (const [kind, k] of kinds) expect(k.rejected, `kind ${kind}`).toBeGreaterThan(0);
  });
});
