/**
 * The `ascent schema <config>` command: its flags here, its work in schema.ts, imported when
 * the command runs (schema.ts holds the GRPO and trainer zod schemas, which every other
 * `ascent` command would otherwise load and build at start-up).
 */
import type { Command } from 'commander';

/** The configs `ascent schema` knows (the keys of schema.ts's CONFIG_SCHEMAS). */
export const CONFIG_NAMES = ['grpo', 'trainer'] as const;

export function registerSchema(program: Command): void {
  program
    .command('schema')
    .description('print the JSON Schema of a config file (grpo or trainer), generated from the zod schema')
    .argument('<config>', CONFIG_NAMES.join(' or '))
    .action(async (name: string) => {
      const { configJsonSchema } = await import('./schema.js');
      process.stdout.write(`${JSON.stringify(configJsonSchema(name), null, 2)}\n`);
    });
}
