/**
 * The one table style of the benchmark suites (and of the GRPO summary): cli-table3
 * with plain heads, one column per key of the rows (in the order of first appearance),
 * numbers right-aligned, missing values as `-`.
 */
import Table from 'cli-table3';

export type Row = object;

function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

export function formatTable(rows: readonly Row[], title?: string): string {
  if (rows.length === 0) return title ? `${title}: no rows` : 'no rows';
  const keys: string[] = [];
  for (const r of rows) for (const k of Object.keys(r as Record<string, unknown>)) if (!keys.includes(k)) keys.push(k);
  const get = (r: Row, k: string) => (r as Record<string, unknown>)[k];
  const numeric = keys.map((k) => rows.every((r) => get(r, k) === null || get(r, k) === undefined || typeof get(r, k) === 'number'));
  const table = new Table({ head: keys, style: { head: [], border: [] }, colAligns: numeric.map((n) => (n ? 'right' : 'left')) });
  for (const r of rows) table.push(keys.map((k) => cell(get(r, k))));
  return title ? `${title}\n${table.toString()}` : table.toString();
}

/** Prints a table (and its title) to stdout. */
export function printTable(rows: readonly Row[], title?: string): void {
  console.log(formatTable(rows, title));
}
