/**
 * megatron and Qwen3.5 on 2 real ranks (test/fixtures/train/megatron-qwen35.mjs under launch):
 * tp > 1 is refused with the Gated DeltaNet limit (no tensor- or context-parallel split), and
 * tp = 1 with dp / ep too, since megatron's model and bridge are Qwen3's in this build; both
 * at MegatronStrategy.create() and before the sharded checkpoint load, each a ConfigError on
 * every rank pointing to fsdp2. A Qwen3 model still builds with tp = 2 (the refusal is Qwen3.5's).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureParallelBuilt, launchFixture } from './helpers/parallel-launch.js';
import { MOE_TEXT, TEXT } from './helpers/qwen35-configs.js';

const dir = mkdtempSync(join(tmpdir(), 'ascent-megatron-qwen35-'));
const dense = join(dir, 'dense');
const moe = join(dir, 'moe');

beforeAll(() => {
  ensureParallelBuilt();
  for (const [d, cfg] of [
    [dense, TEXT],
    [moe, MOE_TEXT],
  ] as const) {
    mkdirSync(d);
    writeFileSync(join(d, 'config.json'), JSON.stringify(cfg));
  }
}, 120_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type Err = { name: string; code: string; message: string } | null;

describe('megatron refuses Qwen3.5 with what is not supported', () => {
  it('tp=2: the GDN tensor-parallel limit; tp=1 ep=2 and the checkpoint load: not in this build; Qwen3 still builds', async () => {
    const run = await launchFixture(2, 'test/fixtures/train/megatron-qwen35.mjs', [dense, moe], { HCCL_EXEC_TIMEOUT: '20' }, 120_000);
    expect(run.code, run.stderr).toBe(0);
    expect(run.results.map((r) => r.rank)).toEqual([0, 1]);
    for (const r of run.results as Array<Record<string, Err> & { rank: number }>) {
      const { tp2, ep2, load } = r;
      for (const e of [tp2, ep2, load]) {
        expect(e?.name, `rank ${r.rank}`).toBe('ConfigError');
        expect(e!.message).toMatch(/HINT: train qwen3_5(_moe)? with strategy 'fsdp2' \(data parallel over every rank, tp=1, ep=1\) or 'single'\./);
      }
      expect(tp2!.message).toMatch(
        /^MegatronStrategy\.create\(\): qwen3_5 does not support tensor parallelism \(tp=2\): its Gated DeltaNet layers \(linear_attn\) have no tensor-parallel or context-parallel split/,
      );
      expect(ep2!.message).toMatch(
        /^MegatronStrategy\.create\(\): megatron does not run qwen3_5_moe in this build, at any tp \/ dp \/ ep: its model and Megatron-name bridge cover the Qwen3 decoder only \(no Gated DeltaNet layer, gated attention or shared expert\)/,
      );
      expect(load!.message).toMatch(/^loadMegatronShards\(\): megatron does not run qwen3_5_moe in this build/);
      expect(r.qwen3, `rank ${r.rank}: Qwen3 under tp=2`).toBeNull();
    }
  }, 150_000);
});
