/** `ascent schema`: the JSON Schema generated from the zod config schemas validates what the config accepts and rejects what it rejects. */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import Ajv2020 from 'ajv/dist/2020.js';
import { configJsonSchema } from '../src/cli/schema.js';
import { parseGrpoConfig } from '../src/grpo/config.js';

describe('ascent schema', () => {
  const schema = configJsonSchema('grpo');
  const validate = new Ajv2020({ strict: false }).compile(schema);

  it('the GRPO schema has every field with its constraints', () => {
    expect(schema).toMatchObject({ type: 'object', additionalProperties: false, required: ['model'] });
    const props = schema.properties as Record<string, Record<string, unknown>>;
    expect(props.mode).toMatchObject({ enum: ['auto', 'server', 'colocate'], default: 'auto' });
    expect(Object.keys(props)).toEqual(expect.arrayContaining(['model', 'steps', 'trainer', 'engine', 'sync', 'log', 'logOverwrite', 'resume', '$schema']));
  });

  it('agrees with the zod schema on good and bad configs', () => {
    const good = [
      { model: 'm' },
      {
        $schema: './grpo.schema.json',
        model: 'm',
        mode: 'colocate',
        steps: 3,
        engine: { tp: 2 },
        trainer: { strategy: 'megatron', tp: 2 },
        sync: { bucketBytes: '64MiB', verify: true },
      },
      { model: 'm', trainer: { lora: { rank: 4, alpha: 8, targetModules: ['q', 'v'] } }, log: 'run.jsonl', logOverwrite: true },
    ];
    for (const c of good) {
      expect(validate(c), JSON.stringify(validate.errors)).toBe(true);
      const { $schema: _, ...rest } = c as Record<string, unknown>;
      expect(() => parseGrpoConfig(rest, 4)).not.toThrow();
    }
    const bad = [
      {},
      { model: 'm', engine: { tp: 3 } },
      { model: 'm', mode: 'both' },
      { model: 'm', steps: 0 },
      { model: 'm', stepz: 3 },
      { model: 'm', trainer: { strategy: 'ddp' } },
    ];
    for (const c of bad) {
      expect(validate(c), JSON.stringify(c)).toBe(false);
      expect(() => parseGrpoConfig(c, 4), JSON.stringify(c)).toThrow();
    }
  });

  it('the command prints JSON; an unknown config name is a clear error', () => {
    const ok = spawnSync(process.execPath, ['bin/ascent.mjs', 'schema', 'grpo'], { encoding: 'utf8' });
    expect(ok.status, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toEqual(JSON.parse(JSON.stringify(schema)));
    const trainer = spawnSync(process.execPath, ['bin/ascent.mjs', 'schema', 'trainer'], { encoding: 'utf8' });
    expect(JSON.parse(trainer.stdout).properties.strategy.enum).toEqual(expect.arrayContaining(['single', 'fsdp2', 'megatron']));
    const bad = spawnSync(process.execPath, ['bin/ascent.mjs', 'schema', 'nope'], { encoding: 'utf8' });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/no config named "nope"; choose one of grpo, trainer/);
  });
});
