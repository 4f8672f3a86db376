/**
 * Fuzz: 10,000 mutants of a valid safetensors file in one process (seeded, so a failure
 * reproduces): byte flips, truncations, length fields, random JSON, structured edits, keys
 * named after Object.prototype members, 5,000-level nesting, duplicate keys and zero-element
 * shapes with huge dimensions.
 * Properties: SafetensorsFile.open either accepts or throws a CheckpointFormatError naming
 * the file (never another error); it accepts exactly the files an independent validator
 * written here (JSON.parse plus a key count for duplicates, BigInt sizes) calls valid, and
 * an accepted file's tensors read back as exactly their bytes; peak RSS stays bounded.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointFormatError } from '../src/runtime/errors.js';
import { SafetensorsFile, writeSafetensors, type TensorSource } from '../src/model/safetensors.js';
import { Prng } from '../src/model/prng.js';

const ITERATIONS = 10_000;
const KINDS = 8;
let dir: string;
let base: Buffer;
let headerLen: number;

beforeAll(async () => {
  dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'ascent-fuzz-'));
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

// ---- An independent validator of the format (not the code under test). ----

const SIZES: Record<string, number> = { F32: 4, BF16: 2, F16: 2, I32: 4, I64: 8, U8: 1, I8: 1, BOOL: 1 };

/** Counts `"key":` tokens in JSON text at any depth (strings followed by a colon). */
function keyTokens(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] !== '"') continue;
    let j = i + 1;
    while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
    let k = j + 1;
    while (' \t\r\n'.includes(text[k] ?? 'x')) k++;
    if (text[k] === ':') n++;
    i = j;
  }
  return n;
}

/** Counts the keys of every object in a JSON.parse result (JSON.parse keeps "__proto__" as an own key); iterative, any depth. */
function parsedKeys(root: unknown): number {
  let n = 0;
  const stack: unknown[] = [root];
  while (stack.length) {
    const v = stack.pop();
    if (Array.isArray(v)) stack.push(...v);
    else if (typeof v === 'object' && v !== null) {
      const keys = Object.keys(v);
      n += keys.length;
      for (const k of keys) stack.push((v as Record<string, unknown>)[k]);
    }
  }
  return n;
}

function isValid(bytes: Buffer): boolean {
  if (bytes.length < 8) return false;
  const n = bytes.readBigUInt64LE(0);
  if (n > 100_000_000n || n > BigInt(bytes.length - 8)) return false;
  const hdr = bytes.subarray(8, 8 + Number(n));
  let text: string;
  let json: unknown;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(hdr);
    json = JSON.parse(text);
  } catch {
    return false;
  }
  if (keyTokens(text) !== parsedKeys(json)) return false; // a duplicate key somewhere
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return false;
  const dataLen = BigInt(bytes.length - 8 - Number(n));
  const ranges: Array<[bigint, bigint]> = [];
  for (const [name, e] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (typeof e !== 'object' || e === null || Array.isArray(e)) return false;
      if (!Object.values(e).every((v) => typeof v === 'string')) return false;
      continue;
    }
    if (typeof e !== 'object' || e === null || Array.isArray(e)) return false;
    const keys = Object.keys(e).sort();
    if (keys.join() !== 'data_offsets,dtype,shape') return false;
    const { dtype, shape, data_offsets: offs } = e as Record<string, unknown>;
    if (typeof dtype !== 'string' || !Object.hasOwn(SIZES, dtype)) return false;
    const nat = (x: unknown) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;
    if (!Array.isArray(shape) || !shape.every(nat)) return false;
    if (!Array.isArray(offs) || offs.length !== 2 || !offs.every(nat)) return false;
    const [b, en] = [BigInt(offs[0]), BigInt(offs[1])];
    const size = shape.reduce((p: bigint, d: number) => p * BigInt(d), 1n) * BigInt(SIZES[dtype]);
    if (en < b || en - b !== size || en > dataLen) return false;
    ranges.push([b, en]);
  }
  ranges.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0));
  let pos = 0n;
  for (const [b, en] of ranges) {
    if (b !== pos) return false;
    pos = en;
  }
  return pos === dataLen;
}

// ---- Mutations. Headers are built as key/value pair lists so duplicates and "__proto__" survive. ----

class Obj {
  constructor(public pairs: Array<[string, J]>) {}
}
class Raw {
  constructor(public text: string) {}
}
type J = null | boolean | number | string | J[] | Obj | Raw;

function toJ(v: unknown): J {
  if (Array.isArray(v)) return v.map(toJ);
  if (typeof v === 'object' && v !== null) return new Obj(Object.entries(v).map(([k, x]) => [k, toJ(x)]));
  return v as J;
}
function ser(v: J): string {
  if (v instanceof Raw) return v.text;
  if (v instanceof Obj) return `{${v.pairs.map(([k, x]) => `${JSON.stringify(k)}:${ser(x)}`).join(',')}}`;
  if (Array.isArray(v)) return `[${v.map(ser).join(',')}]`;
  return JSON.stringify(v);
}

const PROTO_NAMES = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__', 'prototype'];
const WEIRD_NUMBERS: J[] = [-1, 0, 1, 2, 3, 7, 8, 1.5, 2 ** 31, 2 ** 32, 2 ** 32 + 4, 2 ** 53, 2 ** 64, 1e308, -0, '4', null, true, [], new Obj([])];
const DTYPES: J[] = ['F32', 'BF16', 'F16', 'I32', 'I64', 'U8', 'I8', 'BOOL', 'F64', 'f32', '', 7, null, ...PROTO_NAMES];
const ZERO_SHAPES: J[][] = [[2 ** 32, 2 ** 32, 0], [0, 2 ** 53 - 1], [2 ** 40, 0, 2 ** 40], [0]];

function deep(levels: number, open: string, close: string, inner = '1'): Raw {
  return new Raw(open.repeat(levels) + inner + close.repeat(levels));
}

function withLength(json: Buffer, data: Buffer, length: bigint = BigInt(json.length)): Buffer {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(length);
  return Buffer.concat([len, json, data]);
}

function mutate(rng: Prng, kind: number): Buffer {
  const data = base.subarray(8 + headerLen);
  const header = toJ(JSON.parse(base.subarray(8, 8 + headerLen).toString())) as Obj;
  const tensors = header.pairs.filter(([k]) => k !== '__metadata__');
  const entry = () => rng.pick(tensors)[1] as Obj;
  const field = (e: Obj, k: string) => e.pairs.find(([n]) => n === k);
  /** Sets `k` in `e`, adding the pair when an earlier edit removed it. */
  const set = (e: Obj, k: string, v: J) => {
    const f = field(e, k);
    if (f) f[1] = v;
    else e.pairs.push([k, v]);
  };
  const finish = (h: J, extra = 0) => {
    const d = extra >= 0 ? Buffer.concat([data, Buffer.alloc(extra, 9)]) : data.subarray(0, data.length + extra);
    return withLength(Buffer.from(ser(h)), d);
  };
  switch (kind) {
    case 0: {
      // random byte flips inside the header (and sometimes the length field)
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
    case 2: {
      // structured edits of offsets / shapes / dtypes / entries
      for (let e = rng.int(1, 3); e > 0; e--) {
        const t = entry();
        const offs = field(t, 'data_offsets');
        const shape = field(t, 'shape');
        const what = rng.int(0, 8);
        if (what === 0) set(t, 'dtype', rng.pick(DTYPES));
        else if (what === 1 && offs && Array.isArray(offs[1])) offs[1][rng.int(0, 1)] = rng.pick(WEIRD_NUMBERS);
        else if (what === 2 && offs && Array.isArray(offs[1])) offs[1] = offs[1].map((v) => (typeof v === 'number' ? v + rng.int(-8, 8) : v));
        else if (what === 3 && shape && Array.isArray(shape[1])) shape[1].push(rng.pick(WEIRD_NUMBERS));
        else if (what === 4 && shape && Array.isArray(shape[1])) shape[1].pop();
        else if (what === 5) set(t, 'shape', rng.pick(WEIRD_NUMBERS));
        else if (what === 6) t.pairs.splice(rng.int(0, t.pairs.length - 1), 1);
        else if (what === 7) header.pairs.push([rng.pick(tensors)[0] + rng.pick(['', 'x']), rng.pick<J>([1, 'x', [], null, new Obj([...t.pairs])])]);
        else header.pairs[0][1] = rng.pick<J>([new Obj([['a', 1]]), [], 'x', new Obj([['ok', 'y']])]);
      }
      return finish(header, rng.next() < 0.2 ? rng.int(-16, 16) : 0);
    }
    case 3: {
      // the length field: off by a little, random, huge or zero
      const r = rng.int(0, 3);
      const len =
        r === 0 ? BigInt(headerLen + rng.int(-8, 8)) : r === 1 ? BigInt(rng.nextU32()) : r === 2 ? (BigInt(rng.nextU32()) << 32n) | BigInt(rng.nextU32()) : 0n;
      const out = Buffer.from(base);
      out.writeBigUInt64LE(len < 0n ? 0n : len, 0);
      return out;
    }
    case 4: {
      // whole header replaced by a random JSON-ish string
      const pieces = [
        '{',
        '}',
        '[',
        ']',
        '"a"',
        ':',
        ',',
        '1',
        '"F32"',
        '"shape"',
        '"data_offsets"',
        '"dtype"',
        ' ',
        '-',
        'e9',
        '"__proto__"',
        '"\\u0000"',
        '"\\ud800"',
      ];
      let s = '';
      for (let n = rng.int(0, 30); n > 0; n--) s += rng.pick(pieces);
      return withLength(Buffer.from(s), data);
    }
    case 5: {
      // keys and values named after Object.prototype members
      const name = rng.pick(PROTO_NAMES);
      const r = rng.int(0, 4);
      if (r === 0)
        rng.pick(tensors)[0] = name; // a tensor called "__proto__" etc. (valid)
      else if (r === 1) set(entry(), 'dtype', name);
      else if (r === 2) (header.pairs[0][1] as Obj).pairs.push([name, rng.pick<J>(['x', 1, new Obj([])])]);
      else if (r === 3) entry().pairs.push([name, rng.pick<J>([new Obj([]), 'F32', [1]])]);
      else
        header.pairs.push([
          name,
          rng.pick<J>([
            new Obj([]),
            null,
            new Obj([
              ['dtype', 'F32'],
              ['shape', [0]],
              ['data_offsets', [0, 0]],
            ]),
          ]),
        ]);
      return finish(header);
    }
    case 6: {
      // 5,000-level nesting somewhere
      const levels = rng.pick([65, 1000, 5000]);
      const nest = rng.next() < 0.5 ? deep(levels, '[', ']') : deep(levels, '{"a":', '}');
      const r = rng.int(0, 4);
      if (r === 0) set(entry(), 'shape', nest);
      else if (r === 1) set(entry(), 'data_offsets', nest);
      else if (r === 2) (header.pairs[0][1] as Obj).pairs.push(['deep', nest]);
      else if (r === 3) header.pairs.push(['deep', nest]);
      else return withLength(Buffer.from(nest.text), data);
      return finish(header);
    }
    default: {
      // duplicate keys (top level, in an entry, in __metadata__) or zero-element shapes
      const r = rng.int(0, 3);
      if (r === 0) {
        const t = rng.pick(tensors);
        header.pairs.push([t[0], t[1]]);
      } else if (r === 1) {
        const t = entry();
        t.pairs.push(rng.pick(t.pairs));
      } else if (r === 2) (header.pairs[0][1] as Obj).pairs.push(['format', rng.pick(['pt', 'np'])]);
      else set(header.pairs.find(([k]) => k === 'empty')![1] as Obj, 'shape', rng.pick(ZERO_SHAPES));
      return finish(header);
    }
  }
}

describe('safetensors header fuzz', () => {
  it(`${ITERATIONS} mutants: accepted exactly when valid, else a CheckpointFormatError; bounded memory`, async () => {
    const rng = new Prng(20240611);
    const path = join(dir, 'mutant.safetensors');
    const kinds = Array.from({ length: KINDS }, () => ({ valid: 0, rejected: 0 }));
    const rssBefore = process.resourceUsage().maxRSS;
    for (let i = 0; i < ITERATIONS; i++) {
      const kind = i % KINDS;
      const bytes = mutate(rng, kind);
      writeFileSync(path, bytes);
      const valid = isValid(bytes);
      const where = `iteration ${i} (kind ${kind}), file (base64, first 2 KiB): ${bytes.subarray(0, 2048).toString('base64')}`;
      let f: SafetensorsFile | undefined;
      try {
        f = await SafetensorsFile.open(path);
      } catch (err) {
        if (!(err instanceof CheckpointFormatError)) throw new Error(`${where}\nraised ${(err as Error)?.constructor?.name}: ${(err as Error)?.message}`);
        expect(err.message, where).toContain(path);
        expect(valid, `${where}\nrejected a valid file: ${err.message}`).toBe(false);
        kinds[kind].rejected++;
        continue;
      }
      try {
        expect(valid, `${where}\naccepted an invalid file`).toBe(true);
        let covered = 0;
        for (const t of f.tensors) {
          const got = await f.read(t.name);
          expect(Buffer.from(got).equals(bytes.subarray(f.dataStart + t.begin, f.dataStart + t.end)), where).toBe(true);
          covered += got.length;
        }
        expect(covered, where).toBe(bytes.length - f.dataStart);
        kinds[kind].valid++;
      } finally {
        await f.close();
      }
    }
    // Peak RSS (KiB) grew by less than 256 MiB: no mutant made the reader allocate what the file claims.
    expect(process.resourceUsage().maxRSS - rssBefore).toBeLessThan(256 * 1024);
    // Every family is rejected sometimes; the valid-leaning families are also accepted sometimes.
    for (const [kind, k] of kinds.entries()) expect(k.rejected, `kind ${kind}`).toBeGreaterThan(0);
    for (const kind of [2, 5, 7]) expect(kinds[kind].valid, `kind ${kind}`).toBeGreaterThan(0);
  }, 120_000);
});
