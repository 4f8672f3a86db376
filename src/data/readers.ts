/**
 * Row readers for prompt datasets: JSONL (one JSON object per line, blank lines
 * skipped) and Parquet (hyparquet, with hyparquet-compressors for snappy, gzip,
 * zstd, brotli, lz4). Rows keep their 1-based source position for error messages.
 */
import { existsSync, readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { ConfigError } from '../runtime/errors.js';

export type Row = Record<string, unknown>;
export interface SourceRow {
  /** 1-based line (JSONL) or row (Parquet) number. */
  at: number;
  row: Row;
}
export type DatasetFormat = 'jsonl' | 'parquet';

export function formatOf(path: string, format?: DatasetFormat): DatasetFormat {
  if (format) return format;
  const ext = extname(path).toLowerCase();
  if (ext === '.jsonl' || ext === '.ndjson') return 'jsonl';
  if (ext === '.parquet') return 'parquet';
  throw new ConfigError(`Dataset ${path}: cannot tell the format from the extension ${JSON.stringify(ext)}. HINT: use .jsonl or .parquet, or set format.`, {
    path,
  });
}

export function readJsonl(path: string): SourceRow[] {
  const rows: SourceRow[] = [];
  readFileSync(path, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      if (line.trim() === '') return;
      let v: unknown;
      try {
        v = JSON.parse(line);
      } catch (err) {
        throw new ConfigError(`Dataset ${path} line ${i + 1}: not valid JSON (${(err as Error).message}). HINT: each line must be one JSON object.`, {
          path,
          line: i + 1,
        });
      }
      if (!v || typeof v !== 'object' || Array.isArray(v)) {
        throw new ConfigError(
          `Dataset ${path} line ${i + 1}: expected a JSON object, got ${Array.isArray(v) ? 'an array' : typeof v}. HINT: each line must be one JSON object.`,
          { path, line: i + 1 },
        );
      }
      rows.push({ at: i + 1, row: v as Row });
    });
  return rows;
}

/** Parquet INT64 comes back as bigint: safe integers become numbers, others strings (structured-clone and JSON friendly). */
function plain(v: unknown): unknown {
  if (typeof v === 'bigint') return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object' && !(v instanceof Date) && !ArrayBuffer.isView(v)) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  }
  return v;
}

export async function readParquet(path: string): Promise<SourceRow[]> {
  const buf = readFileSync(path);
  const file = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer;
  let objs: Row[];
  try {
    // Loaded on first use: a run without Parquet data (and every rank that reads none) skips their start-up cost.
    const [{ parquetReadObjects }, { compressors }] = await Promise.all([import('hyparquet'), import('hyparquet-compressors')]);
    objs = (await parquetReadObjects({ file, compressors })) as Row[];
  } catch (err) {
    throw new ConfigError(
      `Dataset ${path}: cannot read Parquet: ${(err as Error).message}. HINT: check that the file is a complete Parquet file.`,
      { path },
      { cause: err },
    );
  }
  return objs.map((row, i) => ({ at: i + 1, row: plain(row) as Row }));
}

export async function readRows(path: string, format?: DatasetFormat): Promise<SourceRow[]> {
  if (!existsSync(path))
    throw new ConfigError(`Dataset file ${path} does not exist. HINT: check dataset.path (relative paths are against the current directory).`, { path });
  return formatOf(path, format) === 'jsonl' ? readJsonl(path) : readParquet(path);
}
