/** `ascent inspect` as a user runs it: `node bin/ascent.mjs inspect ...` in a child process (uses dist/). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModelConfig } from '../src/model/config.js';
import { initParams, toHostTensors } from '../src/model/params.js';
import { writeCheckpoint } from '../src/model/checkpoint.js';
import { writeSafetensors } from '../src/model/safetensors.js';

let dir: string;

function ascent(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ['bin/ascent.mjs', ...args], { encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

async function save(folder: string, configPath: string, maxShardBytes: number, expertLayout?: 'fused' | 'per-expert'): Promise<void> {
  mkdirSync(folder, { recursive: true });
  const cfg = loadModelConfig(configPath);
  const tensors = toHostTensors(initParams(cfg, 1, { expertLayout }));
  await writeCheckpoint(
    folder,
    [...tensors].map(([name, t]) => ({ name, ...t })),
    { maxShardBytes, metadata: { format: 'pt' } },
  );
  copyFileSync(configPath, join(folder, 'config.json'));
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ascent-inspect-'));
  await save(join(dir, 'dense'), 'examples/models/tiny-dense/config.json', 1 << 30);
  await save(join(dir, 'moe-sharded'), 'examples/models/tiny-moe/config.json', 1 << 20);
  await save(join(dir, 'moe-per-expert'), 'examples/models/tiny-moe/config.json', 1 << 30, 'per-expert');
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('ascent inspect', () => {
  it('a good single file: table of name, dtype, shape, bytes; config checked', () => {
    const r = ascent('inspect', join(dir, 'dense'));
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(/^name\s+dtype\s+shape\s+bytes$/);
    expect(r.stdout).toMatch(/model\.embed_tokens\.weight\s+F32\s+\[64, 128\]\s+32768\n/);
    expect(r.stdout).toMatch(/model\.layers\.1\.mlp\.down_proj\.weight\s+F32\s+\[128, 384\]\s+196608\n/);
    expect(r.stdout).toMatch(/24 tensors, [\d.]+ MiB in 1 file \(model\.safetensors\)/);
    expect(r.stdout).toMatch(/config: .*config\.json \(qwen3\): names and shapes match/);
    expect(r.stdout).toMatch(/ok: checkpoint is valid\n$/);
    // The file itself (not the folder) works too.
    expect(ascent('inspect', join(dir, 'dense', 'model.safetensors')).status).toBe(0);
  });

  it('a sharded folder: every tensor with its shard, and the layout found', () => {
    const r = ascent('inspect', join(dir, 'moe-sharded'));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.split('\n')[0]).toMatch(/^name\s+dtype\s+shape\s+bytes\s+file$/);
    expect(r.stdout).toMatch(/model\.layers\.1\.mlp\.experts\.gate_up_proj\s+F32\s+\[8, 256, 128\]\s+1048576\s+model-000\d\d-of-00005\.safetensors/);
    expect(r.stdout).toMatch(/25 tensors, .* in 5 files/);
    expect(r.stdout).toMatch(/\(qwen3_moe, fused experts\)/);
    expect(ascent('inspect', join(dir, 'moe-per-expert')).stdout).toMatch(/\(qwen3_moe, per-expert experts\)/);
  });

  it('--json gives the same facts as data', () => {
    const r = ascent('inspect', '--json', join(dir, 'moe-sharded'));
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.files.length).toBe(5);
    expect(report.tensors.length).toBe(25);
    expect(report.metadata).toEqual({ format: 'pt' });
    expect(report.config.expertLayout).toBe('fused');
  });

  it('a malformed file exits 1 with the error naming file and tensor', async () => {
    const bad = join(dir, 'bad.safetensors');
    const good = readFileSync(join(dir, 'dense', 'model.safetensors'));
    writeFileSync(bad, good.subarray(0, good.length - 10)); // truncated
    let r = ascent('inspect', bad);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^ascent: .*bad\.safetensors: tensor "model\.norm\.weight": data_offsets \[\d+, \d+\] run past the data section/);

    await writeSafetensors(bad, [{ name: 'x', dtype: 'F32', shape: [1], data: new Uint8Array(4) }]);
    const bytes = readFileSync(bad);
    writeFileSync(bad, Buffer.from(bytes.toString('latin1').replace('"F32"', '"F99"'), 'latin1'));
    r = ascent('inspect', bad);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/bad\.safetensors: tensor "x": dtype is 'F99' of type string; expected one of F32/);
  });

  it('a checkpoint that does not match its config.json exits 1 naming the tensors', () => {
    const folder = join(dir, 'mismatch');
    mkdirSync(folder);
    copyFileSync(join(dir, 'dense', 'model.safetensors'), join(folder, 'model.safetensors'));
    copyFileSync('examples/models/tiny-moe/config.json', join(folder, 'config.json'));
    const r = ascent('inspect', folder);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/No expert tensors for MoE layers \[0, 1\]/);
    expect(ascent('inspect', '--config', 'examples/models/tiny-dense/config.json', folder).status).toBe(0);
  });

  it('a missing path or a shard missing from the index exits 1', () => {
    expect(ascent('inspect', join(dir, 'nope')).stderr).toMatch(/nope: cannot open \(ENOENT\)/);
    const folder = join(dir, 'moe-sharded');
    rmSync(join(folder, 'model-00003-of-00005.safetensors'));
    const r = ascent('inspect', folder);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/shard "model-00003-of-00005\.safetensors" is missing/);
  });

  it('every malformed file or folder: exit 1, nothing on stdout, one line on stderr, no stack trace', async () => {
    const bad = join(dir, 'malformed');
    mkdirSync(bad);
    const file = (name: string, header: string | Buffer, data = Buffer.alloc(0)) => {
      const json = typeof header === 'string' ? Buffer.from(header) : header;
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(json.length));
      writeFileSync(join(bad, name), Buffer.concat([len, json, data]));
      return join(bad, name);
    };
    const folder = (name: string) => {
      mkdirSync(join(bad, name));
      return join(bad, name);
    };
    const t = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}';
    const cases: Array<[string, RegExp]> = [
      [file('dup.safetensors', `{"a":${t},"a":${t}}`, Buffer.alloc(8)), /tensor "a": appears twice/],
      [file('dup-entry.safetensors', '{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', Buffer.alloc(4)), /key "dtype" appears twice/],
      [file('proto.safetensors', '{"a":{"dtype":"constructor","shape":[1],"data_offsets":[0,4]}}', Buffer.alloc(4)), /dtype is 'constructor'/],
      [file('meta.safetensors', '{"__metadata__":{"toString":[]}}'), /__metadata__\["toString"\] is an array/],
      [file('deep.safetensors', `{"a":${'['.repeat(5000)}${']'.repeat(5000)}}`), /nesting deeper than 8 levels/],
      [file('utf8.safetensors', Buffer.from('{"\xff":1}', 'latin1')), /header is not valid UTF-8/],
      [file('empty-header.safetensors', ''), /header is not valid JSON: unexpected end of JSON/],
      [(writeFileSync(join(bad, 'text.safetensors'), 'hello'), join(bad, 'text.safetensors')), /file is 5 bytes/],
      [folder('empty-folder'), /no model\.safetensors\.index\.json or model\.safetensors in this folder/],
      [(mkdirSync(join(folder('dir-single'), 'model.safetensors')), join(bad, 'dir-single')), /model\.safetensors: is a directory/],
      [(mkdirSync(join(folder('dir-index'), 'model.safetensors.index.json')), join(bad, 'dir-index')), /cannot read the shard index \(it is a directory/],
      [
        (writeFileSync(join(folder('dup-index'), 'model.safetensors.index.json'), '{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}'),
        join(bad, 'dup-index')),
        /duplicate key "a"/,
      ],
      [
        (writeFileSync(join(folder('proto-index'), 'model.safetensors.index.json'), '{"weight_map":{"constructor":"model-00001-of-00001.safetensors"}}'),
        join(bad, 'proto-index')),
        /shard "model-00001-of-00001\.safetensors" is missing/,
      ],
      [
        (writeFileSync(join(folder('bad-config'), 'config.json'), '{'),
        copyFileSync(join(dir, 'dense', 'model.safetensors'), join(bad, 'bad-config', 'model.safetensors')),
        join(bad, 'bad-config')),
        /config\.json/,
      ],
      [join(bad, 'missing'), /missing: cannot open \(ENOENT\)/],
    ];
    const shardDir = join(bad, 'moe-sharded-copy');
    cpSync(join(dir, 'moe-sharded'), shardDir, { recursive: true });
    rmSync(join(shardDir, 'model-00002-of-00005.safetensors'));
    mkdirSync(join(shardDir, 'model-00002-of-00005.safetensors'));
    cases.push([shardDir, /model-00002-of-00005\.safetensors: is a directory/]);
    const fifo = join(bad, 'fifo.safetensors');
    // A FIFO must not hang the reader (opened non-blocking, then refused).
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    cases.push([fifo, /fifo\.safetensors: is not a regular file/]);
    for (const [path, msg] of cases) {
      const r = ascent('inspect', path);
      expect(r.status, `${path}: ${r.stderr}`).toBe(1);
      expect(r.stdout, path).toBe('');
      expect(r.stderr, path).toMatch(/^ascent: [^\n]+\n$/);
      expect(r.stderr, path).toMatch(msg);
      expect(r.stderr, path).not.toMatch(/\n\s+at /);
    }
  });
});
