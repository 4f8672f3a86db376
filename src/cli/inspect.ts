/**
 * `ascent inspect <file or folder>`: validates a safetensors checkpoint (single file, shard
 * index, or folder) and lists its tensors. When the folder holds a config.json, the tensor
 * names and shapes are also checked against that config. A malformed checkpoint, folder or
 * config exits 1 with one line naming what is wrong (never a stack trace, never exit 0).
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import type { Command } from 'commander';
import { AscentError, InvalidArgumentError } from '../runtime/errors.js';
import type { CheckpointTensor } from '../model/checkpoint.js';

interface InspectReport {
  path: string;
  files: string[];
  metadata: Record<string, string>;
  tensors: Array<{ name: string; dtype: string; shape: number[]; bytes: number; file: string }>;
  totalBytes: number;
  config?: { path: string; modelType: string; expertLayout: string | null };
  warnings: string[];
}

export async function inspectCheckpoint(path: string, opts: { config?: string } = {}): Promise<InspectReport> {
  // The model code is imported here, not at the top: `ascent` registers this command on every start.
  const { Checkpoint } = await import('../model/checkpoint.js');
  const ck = await Checkpoint.open(path);
  try {
    const folder = existsSync(path) && statSync(path).isDirectory() ? path : dirname(path);
    const tensors = ck.tensors;
    const report: InspectReport = {
      path,
      files: ck.shards.map((s) => relative(folder, s.path) || s.path),
      metadata: Object.assign(Object.create(null) as Record<string, string>, ...ck.shards.map((s) => s.metadata)),
      tensors: tensors.map((t: CheckpointTensor) => ({ name: t.name, dtype: t.dtype, shape: t.shape, bytes: t.end - t.begin, file: relative(folder, t.file) })),
      totalBytes: tensors.reduce((s, t) => s + t.end - t.begin, 0),
      warnings: [...ck.warnings],
    };
    const configPath = opts.config ?? join(folder, 'config.json');
    if (opts.config !== undefined || existsSync(configPath)) {
      const [{ loadModelConfig }, { checkParamsAgainstConfig }] = await Promise.all([import('../model/config.js'), import('../model/params.js')]);
      const cfg = loadModelConfig(configPath);
      const layout = checkParamsAgainstConfig(tensors, cfg);
      report.config = { path: configPath, modelType: cfg.modelType, expertLayout: layout };
    }
    return report;
  } finally {
    await ck.close();
  }
}

function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  let v = n;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(2)} ${units[u]}`;
}

export function formatInspectReport(r: InspectReport): string {
  const sharded = r.files.length > 1;
  const head = ['name', 'dtype', 'shape', 'bytes', ...(sharded ? ['file'] : [])];
  const rows = r.tensors.map((t) => [t.name, t.dtype, `[${t.shape.join(', ')}]`, String(t.bytes), ...(sharded ? [t.file] : [])]);
  const widths = head.map((h, c) => Math.max(h.length, ...rows.map((row) => row[c].length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (c === 3 ? cell.padStart(widths[c]) : cell.padEnd(widths[c])))
      .join('  ')
      .trimEnd();
  const out = [line(head), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line), ''];
  out.push(`${r.tensors.length} tensors, ${formatBytes(r.totalBytes)} in ${r.files.length} file${r.files.length === 1 ? '' : 's'} (${r.files.join(', ')})`);
  if (Object.keys(r.metadata).length) out.push(`metadata: ${JSON.stringify(r.metadata)}`);
  if (r.config)
    out.push(`config: ${r.config.path} (${r.config.modelType}${r.config.expertLayout ? `, ${r.config.expertLayout} experts` : ''}): names and shapes match`);
  for (const w of r.warnings) out.push(`warning: ${w}`);
  out.push('ok: checkpoint is valid');
  return out.join('\n');
}

export function registerInspect(program: Command): void {
  program
    .command('inspect')
    .description('validate a safetensors checkpoint (file, index.json or folder) and list its tensors')
    .argument('<path>', 'a .safetensors file, a model.safetensors.index.json, or a folder holding either')
    .option('--config <file>', 'check names and shapes against this config.json (default: config.json beside the checkpoint, if any)')
    .option('--json', 'print the report as JSON')
    .action(async (path: string, opts: { config?: string; json?: boolean }) => {
      let report: InspectReport;
      try {
        report = await inspectCheckpoint(path, opts);
      } catch (err) {
        // Every failure is one line and exit code 1 (the CLI's InvalidArgumentError), never a
        // stack trace; the original class and code stay in the details.
        throw oneLineError(err, path);
      }
      process.stdout.write(`${opts.json ? JSON.stringify(report, null, 2) : formatInspectReport(report)}\n`);
    });
}

/** `err` as an InvalidArgumentError with a one-line message (the CLI prints it and exits 1). */
function oneLineError(err: unknown, path: string): InvalidArgumentError {
  const e = err instanceof Error ? err : new Error(String(err));
  const text = e.message.replace(/\s*\n\s*/g, ' ').trim();
  if (e instanceof AscentError) {
    return new InvalidArgumentError(text, { ...e.details, code: e.code, error: e.name }, { cause: err });
  }
  // Not one of Ascent's errors (an I/O error the reader did not anticipate): name the path and the system code.
  const code = (e as NodeJS.ErrnoException).code;
  return new InvalidArgumentError(`${path}: cannot inspect (${code ? `${code}: ` : ''}${text}).`, { file: path, error: e.name }, { cause: err });
}
