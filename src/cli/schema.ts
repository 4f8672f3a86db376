/**
 * `ascent schema <grpo|trainer>`: the JSON Schema of a config file, generated from its
 * zod schema (`z.toJSONSchema`, input side: defaults are optional), so editors validate
 * and complete config files: `ascent schema grpo > grpo.schema.json`, then
 * `"$schema": "./grpo.schema.json"` in the config file (`--config` ignores that key).
 * The command's flags are in schema-command.ts (CONFIG_NAMES there lists these keys).
 */
import { z } from 'zod';
import { InvalidArgumentError } from '../runtime/errors.js';
import { GrpoConfigSchema } from '../grpo/config.js';
import { TrainerConfigSchema } from '../train/config.js';

export const CONFIG_SCHEMAS: Record<string, { schema: z.ZodType; title: string; file: boolean }> = {
  /** file: read from a JSON file (`--config`), which may name its schema in "$schema". */
  grpo: { schema: GrpoConfigSchema, title: 'Ascent GRPO run config (--config file of examples/grpo.ts)', file: true },
  trainer: { schema: TrainerConfigSchema, title: 'Ascent trainer actor config', file: false },
};

export function configJsonSchema(name: string): Record<string, unknown> {
  const entry = CONFIG_SCHEMAS[name];
  if (!entry)
    throw new InvalidArgumentError(`ascent schema: no config named ${JSON.stringify(name)}; choose one of ${Object.keys(CONFIG_SCHEMAS).join(', ')}.`);
  const json = z.toJSONSchema(entry.schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  const props = json.properties as Record<string, unknown> | undefined;
  // Editors look for "$schema" in the file itself; allow it beside the strict fields.
  if (props && entry.file) props.$schema = { type: 'string', description: 'path or URL of this JSON Schema (for editors; ignored by Ascent)' };
  return { ...json, title: entry.title };
}
