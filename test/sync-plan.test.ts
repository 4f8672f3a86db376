// The weight-sync planner (src/sync/plan.ts), on data alone: strategy source descriptors ×
// engine weight slots → one step per source, for the layouts the sync modes run. The
// fast paths are planned where they apply (a Megatron TP shard into an engine of the same
// tp is local in both modes; fsdp2 Shard(0) chunks stream; stacked experts all-gather per
// expert), every rank of a placement gets the same kind, and misuse is refused with a hint.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/runtime/errors.js';
import { loadModelConfig, parseModelConfig, type ModelConfig } from '../src/model/config.js';
import { describeSource, type SourceDescriptor } from '../src/parallel/weight-sources.js';
import { groupSlots } from '../src/rollout/weight-slots.js';
import { planSync, type StepKind } from '../src/sync/plan.js';
import { planLayout } from '../src/train/fsdp2/layout.js';
import { fsdp2SourceDescriptors } from '../src/train/fsdp2/weight-sources.js';
import { megatronSourceDescriptors } from '../src/train/megatron/weight-sources.js';
import { MOE_TEXT } from './helpers/qwen35-configs.js';

const cfgOf = (which: string) => loadModelConfig(new URL(`../examples/models/tiny-${which}/config.json`, import.meta.url).pathname);
const fsdp2 = (cfg: ModelConfig, dp: number, r: number) => fsdp2SourceDescriptors(planLayout(cfg, dp), r).map(describeSource);
const megatron = (cfg: ModelConfig, tp: number, ep: number, t: number) => megatronSourceDescriptors(cfg, { tp, dp: 1, ep }, [0, t]).map(describeSource);

/** The step kind of each source on a colocated rank (engine TP rank = the source rank). */
function colocate(cfg: ModelConfig, sources: SourceDescriptor[], tp: number, rank: number): Map<string, StepKind> {
  const group = groupSlots(cfg, tp);
  const steps = planSync(sources, { tpSize: tp, group, mine: { tpRank: rank, slots: group[rank]! } }, 'colocate');
  return new Map(steps.map((s) => [s.source.key, s.kind]));
}

function server(cfg: ModelConfig, sources: SourceDescriptor[], tp: number, rank: number): Map<string, StepKind> {
  const steps = planSync(sources, { tpSize: tp, mine: { tpRank: rank, slots: groupSlots(cfg, tp)[rank]! } }, 'server');
  return new Map(steps.map((s) => [s.source.key, s.kind]));
}

const qkv = 'decoder.layers.0.self_attention.linear_qkv.weight';

describe('planSync', () => {
  it('colocated fsdp2 dp2 → engine tp 1: Shard(0) chunks stream, whole-row chunks of the engine tp 2 slices are local', () => {
    const cfg = cfgOf('dense');
    const k = colocate(cfg, fsdp2(cfg, 2, 0), 1, 0);
    expect(k.get('model.layers.0.self_attn.q_proj.weight')).toBe('stream');
    expect(k.get('model.embed_tokens.weight')).toBe('stream');
    // Engine tp 2: fsdp2's row halves of q_proj are exactly the engine's TP slices.
    const k2 = colocate(cfg, fsdp2(cfg, 2, 1), 2, 1);
    expect(k2.get('model.layers.0.self_attn.q_proj.weight')).toBe('local');
    expect(k2.get('model.layers.0.input_layernorm.weight')).toBe('stream');
  });

  it('colocated fsdp2 dp2 → engine tp 2, qwen3.5-moe: a one-row tensor (second chunk empty) streams, never local; GDN head slices are local', () => {
    const cfg = parseModelConfig(MOE_TEXT);
    const gate = 'model.layers.0.mlp.shared_expert_gate.weight'; // [1, H]: rank 1's chunk holds no row
    for (const rank of [0, 1]) {
      const k = colocate(cfg, fsdp2(cfg, 2, rank), 2, rank);
      expect(k.get(gate), `rank ${rank}`).toBe('stream');
      // in_proj_b [Hv, H]: fsdp2's row halves are the engine's value-head halves.
      expect(k.get('model.layers.0.linear_attn.in_proj_b.weight')).toBe('local');
      // in_proj_qkv: three regions per engine rank, no fsdp2 chunk is one of them.
      expect(k.get('model.layers.0.linear_attn.in_proj_qkv.weight')).toBe('stream');
    }
  });

  it('colocated megatron tp 2 → engine tp 2: the packed qkv shard is local on both ranks, with the slots it lands in', () => {
    const cfg = cfgOf('moe');
    const group = groupSlots(cfg, 2);
    for (const rank of [0, 1]) {
      const sources = megatron(cfg, 2, 2, rank);
      const steps = planSync(sources, { tpSize: 2, group, mine: { tpRank: rank, slots: group[rank]! } }, 'colocate');
      const step = steps.find((s) => s.source.key === qkv)!;
      expect(step.kind).toBe('local');
      expect(step.local!.views.map((v) => [v.slot.hf.split('.').at(-2), v.slot.transform, v.slot.tpRank])).toEqual([
        ['q_proj', 'qkv-pack', rank],
        ['k_proj', 'qkv-pack', rank],
        ['v_proj', 'qkv-pack', rank],
      ]);
      const experts = steps.filter((s) => s.source.map.kind === 'experts');
      expect(experts.length).toBeGreaterThan(0);
      expect(new Set(experts.map((s) => s.kind))).toEqual(new Set(['experts']));
      expect(experts.every((s) => s.slots.length === 1 && s.slots[0]!.transform === 'expert-swap')).toBe(true);
    }
    // Engine tp 1 under a tp 2 trainer: nothing is local, the qkv shard is gathered and re-cut.
    expect(colocate(cfg, megatron(cfg, 2, 2, 0), 1, 0).get(qkv)).toBe('gather');
  });

  it('server: flat views load as HF ranges, a same-tp Megatron shard as a local shard, the rest assembled', () => {
    const cfg = cfgOf('dense');
    expect(server(cfg, fsdp2(cfg, 2, 0), 2, 1).get('model.layers.0.self_attn.q_proj.weight')).toBe('ranges');
    expect(server(cfg, megatron(cfg, 2, 1, 0), 2, 1).get(qkv)).toBe('local');
    expect(server(cfg, megatron(cfg, 2, 1, 0), 1, 0).get(qkv)).toBe('assemble');
    expect(server(cfg, megatron(cfg, 2, 1, 0), 2, 0).get('decoder.layers.0.mlp.linear_fc1.weight')).toBe('ranges');
  });

  it('a colocated plan without every TP rank’s slots is refused with a hint', () => {
    const cfg = cfgOf('dense');
    let err: unknown = null;
    try {
      planSync(fsdp2(cfg, 2, 0), { tpSize: 2, group: groupSlots(cfg, 1) }, 'colocate');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/needs the slots of all 2 engine TP ranks but has 1\. HINT: pass group: groupSlots/);
  });
});
