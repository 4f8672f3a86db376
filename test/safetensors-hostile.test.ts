/**
 * Hostile inputs to the safetensors reader and the shard index: keys named after
 * Object.prototype members, 5,000-level nesting, duplicate keys at every level, a directory
 * where a file should be, and zero-element tensors with huge dimensions. Each is the
 * documented CheckpointFormatError with a message (or, when valid, accepted) — never a raw
 * TypeError / RangeError / EISDIR / ENOENT.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointFormatError } from '../src/runtime/errors.js';
import { SafetensorsFile, writeSafetensors } from '../src/model/safetensors.js';
import { Checkpoint, INDEX_FILE, writeCheckpoint } from '../src/model/checkpoint.js';
import { Prng } from '../src/model/prng.js';

let dir: string;
let n = 0;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-hostile-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A file from a header text written by hand (so duplicates and "__proto__" keys survive). */
function raw(header: string, data: Uint8Array = new Uint8Array(0)): string {
  const json = Buffer.from(header);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  const path = join(dir, `raw-${n++}.safetensors`);
  writeFileSync(path, Buffer.concat([len, json, data]));
  return path;
}

async function formatError(open: () => Promise<{ close(): Promise<void> }>): Promise<string> {
  let err: unknown;
  try {
    await (await open()).close();
  } catch (e) {
    err = e;
  }
  expect(err, 'expected a CheckpointFormatError').toBeInstanceOf(CheckpointFormatError);
  return (err as Error).message;
}
const stError = (path: string) => formatError(() => SafetensorsFile.open(path));

const t4 = (dtype = 'F32') => `{"dtype":"${dtype}","shape":[1],"data_offsets":[0,4]}`;

describe('prototype-named keys are data', () => {
  it('tensor names __proto__, constructor, toString are ordinary tensors', async () => {
    const header = `{"__proto__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"constructor":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"toString":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`;
    const f = await SafetensorsFile.open(raw(header, new Uint8Array([7, 8, 9])));
    expect(f.tensors.map((t) => t.name)).toEqual(['__proto__', 'constructor', 'toString']);
    expect([...(await f.read('toString'))]).toEqual([9]);
    expect([...(await f.read('__proto__'))]).toEqual([7]);
    expect(f.has('hasOwnProperty')).toBe(false);
    await f.close();
  });

  it('a dtype named after a prototype member is an unknown dtype', async () => {
    for (const dtype of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      expect(await stError(raw(`{"x":${t4(dtype)}}`, new Uint8Array(4)))).toMatch(
        new RegExp(`tensor "x": dtype is '${dtype}' of type string; expected one of F32`),
      );
    }
  });

  it('__metadata__ keys constructor / toString / __proto__ are kept as strings on a null-prototype object', async () => {
    const f = await SafetensorsFile.open(raw('{"__metadata__":{"constructor":"a","toString":"b","__proto__":"c"}}'));
    expect(Object.getPrototypeOf(f.metadata)).toBe(null);
    expect({ ...f.metadata }).toEqual({ constructor: 'a', toString: 'b', ['__proto__']: 'c' });
    await f.close();
    expect(await stError(raw('{"__metadata__":{"toString":{}}}'))).toMatch(/__metadata__\["toString"\] is an object .*; expected a string/);
  });

  it('an entry with a "__proto__" or "constructor" key is an unknown key', async () => {
    expect(await stError(raw(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"__proto__":{}}}`, new Uint8Array(4)))).toMatch(
      /tensor "x": unknown key "__proto__"/,
    );
    expect(await stError(raw(`{"x":{"dtype":"F32","shape":[1],"constructor":[0,4]}}`, new Uint8Array(4)))).toMatch(/tensor "x": unknown key "constructor"/);
  });

  it('weight_map keys and metadata named after prototype members', async () => {
    const out = mkdtempSync(join(dir, 'proto-index-'));
    await writeCheckpoint(
      out,
      [
        { name: 'constructor', dtype: 'U8', shape: [1], data: new Uint8Array([1]) },
        { name: '__proto__', dtype: 'U8', shape: [1], data: new Uint8Array([2]) },
      ],
      { maxShardBytes: 1 },
    );
    const index = readFileSync(join(out, INDEX_FILE), 'utf8');
    expect(index).toContain('"__proto__": "model-00002-of-00002.safetensors"');
    const ck = await Checkpoint.open(out);
    expect([...(await ck.read('__proto__'))]).toEqual([2]);
    expect(ck.has('toString')).toBe(false);
    await ck.close();
    // A weight_map that names "toString" (not in any shard) and a metadata "constructor".
    writeFileSync(join(out, INDEX_FILE), index.replace('"weight_map": {', '"weight_map": {"toString": "model-00001-of-00002.safetensors",'));
    expect(await formatError(() => Checkpoint.open(out))).toMatch(
      /weight_map puts tensor "toString" in "model-00001-of-00002.safetensors", but that shard has no such tensor/,
    );
    writeFileSync(join(out, INDEX_FILE), index.replace('"metadata": {', '"metadata": {"constructor": 1, "__proto__": null,'));
    const ok = await Checkpoint.open(out);
    expect(ok.index!.metadata['constructor']).toBe(1);
    await ok.close();
    writeFileSync(join(out, INDEX_FILE), '{"weight_map": {"__proto__": {"x": 1}}}');
    expect(await formatError(() => Checkpoint.open(out))).toMatch(/weight_map\["__proto__"\] is an object .*; expected a file name/);
  });
});

describe('deep nesting', () => {
  const deep = (levels: number) => `${'['.repeat(levels)}1${']'.repeat(levels)}`;
  it('5,000-level arrays in a shape, an offset, metadata or the whole header are format errors', async () => {
    for (const header of [
      `{"x":{"dtype":"F32","shape":${deep(5000)},"data_offsets":[0,4]}}`,
      `{"x":{"dtype":"F32","shape":[1],"data_offsets":${deep(5000)}}}`,
      `{"__metadata__":{"a":${deep(5000)}}}`,
      deep(5000),
      `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`,
    ]) {
      expect(await stError(raw(header, new Uint8Array(4)))).toMatch(/header is not valid JSON: nesting deeper than 8 levels at character \d+/);
    }
  });

  it('in an index', async () => {
    const out = mkdtempSync(join(dir, 'deep-index-'));
    writeFileSync(join(out, INDEX_FILE), `{"metadata":{"x":${deep(5000)}},"weight_map":{}}`);
    expect(await formatError(() => Checkpoint.open(out))).toMatch(/cannot read the shard index \(nesting deeper than 16 levels at character \d+/);
  });
});

describe('duplicate keys are rejected, as safetensors does', () => {
  it('top level, inside an entry, in __metadata__', async () => {
    const d8 = new Uint8Array(8);
    expect(await stError(raw(`{"a":${t4()},"a":${t4()}}`, d8))).toMatch(/tensor "a": appears twice in the header/);
    expect(await stError(raw(`{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, d8.subarray(4)))).toMatch(
      /tensor "a": key "dtype" appears twice in the entry/,
    );
    expect(await stError(raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"data_offsets":[0,4]}}`, d8.subarray(4)))).toMatch(
      /tensor "a": key "data_offsets" appears twice/,
    );
    expect(await stError(raw(`{"__metadata__":{"format":"pt","format":"pt"}}`))).toMatch(/__metadata__ key "format" appears twice/);
    // Escaped spellings of the same key are the same key.
    expect(await stError(raw(`{"a":${t4()},"\\u0061":${t4()}}`, d8))).toMatch(/tensor "a": appears twice/);
    expect(await stError(raw(`{"__metadata__":{"x":"1"},"__metadata__":{"y":"2"}}`))).toMatch(/tensor "__metadata__": appears twice/);
  });

  it("in an index's weight_map", async () => {
    const out = mkdtempSync(join(dir, 'dup-index-'));
    await writeCheckpoint(
      out,
      [
        { name: 'a', dtype: 'U8', shape: [1], data: new Uint8Array([1]) },
        { name: 'b', dtype: 'U8', shape: [1], data: new Uint8Array([2]) },
      ],
      { maxShardBytes: 1 },
    );
    const index = readFileSync(join(out, INDEX_FILE), 'utf8');
    writeFileSync(join(out, INDEX_FILE), index.replace('"weight_map": {', '"weight_map": {"b": "model-00001-of-00002.safetensors",'));
    expect(await formatError(() => Checkpoint.open(out))).toMatch(/cannot read the shard index \(duplicate key "b" at character \d+ \(in "weight_map"\)\)/);
  });
});

describe('a directory where a file should be', () => {
  it('a shard, model.safetensors, the index, or the path given', async () => {
    const out = mkdtempSync(join(dir, 'dir-shard-'));
    await writeCheckpoint(
      out,
      [
        { name: 'a', dtype: 'U8', shape: [1], data: new Uint8Array([1]) },
        { name: 'b', dtype: 'U8', shape: [1], data: new Uint8Array([2]) },
      ],
      { maxShardBytes: 1 },
    );
    rmSync(join(out, 'model-00002-of-00002.safetensors'));
    mkdirSync(join(out, 'model-00002-of-00002.safetensors'));
    expect(await formatError(() => Checkpoint.open(out))).toMatch(/model-00002-of-00002\.safetensors: is a directory; expected a \.safetensors file/);
    const single = mkdtempSync(join(dir, 'dir-single-'));
    mkdirSync(join(single, 'model.safetensors'));
    expect(await formatError(() => Checkpoint.open(single))).toMatch(/model\.safetensors: is a directory/);
    expect(await stError(join(single, 'model.safetensors'))).toMatch(/is a directory/);
    const idx = mkdtempSync(join(dir, 'dir-index-'));
    mkdirSync(join(idx, INDEX_FILE));
    expect(await formatError(() => Checkpoint.open(idx))).toMatch(/cannot read the shard index \(it is a directory; expected a JSON file\)/);
    expect(await formatError(() => Checkpoint.open(join(idx, INDEX_FILE)))).toMatch(/no model\.safetensors\.index\.json or model\.safetensors in this folder/);
  });
});

describe('zero-element tensors', () => {
  it('a shape like [2^32, 2^32, 0] is valid and holds 0 bytes; without the 0 it is a size error', async () => {
    const f = await SafetensorsFile.open(raw(`{"z":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]},"x":${t4()}}`, new Uint8Array(4)));
    expect(f.info('z').shape).toEqual([2 ** 32, 2 ** 32, 0]);
    expect((await f.read('z')).length).toBe(0);
    await f.close();
    expect(await stError(raw(`{"z":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`))).toMatch(
      /tensor "z": data_offsets \[0, 0\] hold 0 bytes but F32 × \[4294967296, 4294967296\] needs 73786976294838206464 bytes/,
    );
  });

  it('the writer accepts and round-trips it', async () => {
    const path = join(dir, 'zero.safetensors');
    await writeSafetensors(path, [{ name: 'z', dtype: 'BF16', shape: [2 ** 32, 2 ** 32, 0], data: new Uint8Array(0) }]);
    const f = await SafetensorsFile.open(path);
    expect(f.tensors).toEqual([{ name: 'z', dtype: 'BF16', shape: [2 ** 32, 2 ** 32, 0], begin: 0, end: 0 }]);
    await f.close();
  });
});

describe('index fuzz', () => {
  it('2,000 mutated index files: Checkpoint.open succeeds or throws a CheckpointFormatError, nothing else', async () => {
    const out = mkdtempSync(join(dir, 'index-fuzz-'));
    await writeCheckpoint(
      out,
      ['a', 'b', 'c'].map((name, i) => ({ name, dtype: 'U8' as const, shape: [2], data: new Uint8Array([i, i]) })),
      { maxShardBytes: 2 },
    );
    const good = readFileSync(join(out, INDEX_FILE), 'utf8');
    const rng = new Prng(7);
    const pieces = [
      '{',
      '}',
      '[',
      ']',
      ',',
      ':',
      '"__proto__"',
      '"constructor"',
      '"toString"',
      '"weight_map"',
      '"metadata"',
      '"a"',
      '"model-00001-of-00003.safetensors"',
      '1',
      '-1',
      'null',
      '"\\u0000"',
    ];
    let ok = 0;
    let rejected = 0;
    for (let i = 0; i < 2000; i++) {
      let text = good;
      const r = i % 4;
      if (r === 0) {
        // splice random JSON pieces in
        for (let k = rng.int(1, 3); k > 0; k--) {
          const at = rng.int(0, text.length);
          text = text.slice(0, at) + rng.pick(pieces) + text.slice(at + rng.int(0, 2));
        }
      } else if (r === 1) {
        // truncate
        text = text.slice(0, rng.int(0, text.length - 1));
      } else if (r === 2) {
        // a prototype-named or duplicate key in weight_map or metadata
        const key = rng.pick(['__proto__', 'constructor', 'toString', 'a', 'b', 'total_size']);
        const where = rng.pick(['"weight_map": {', '"metadata": {']);
        text = text.replace(where, `${where}${JSON.stringify(key)}: ${rng.pick(['"model-00001-of-00003.safetensors"', '{}', '[]', '2', 'null'])},`);
      } else {
        // deep nesting as a value
        text = text.replace('"total_size": 6', `"total_size": ${'['.repeat(rng.pick([20, 5000]))}${']'.repeat(5000)}`);
      }
      writeFileSync(join(out, INDEX_FILE), text);
      try {
        await (await Checkpoint.open(out)).close();
        ok++;
      } catch (err) {
        if (!(err instanceof CheckpointFormatError))
          throw new Error(`mutant ${i} raised ${(err as Error)?.constructor?.name}: ${(err as Error)?.message}\n${text}`);
        rejected++;
      }
    }
    expect(ok + rejected).toBe(2000);
    expect(ok).toBeGreaterThan(0);
    expect(rejected).toBeGreaterThan(1000);
  }, 60_000);
});
