/**
 * The kernels bench's speed targets, checked on its square matmul rows (ratios measured
 * in the same run, so one look says whether each holds):
 *  - fp32 from JS (dispatch included) against single-thread OpenBLAS: >= 0.8 at n = 64,
 *    >= 0.95 at n >= 128 (the shapes a small model lives on);
 *  - bf16 (AMX tiles, or AVX-512 BF16 dot products without AMX) against fp32 of the same n,
 *    both from JS: >= 1.5 at n >= 256. Only where bf16 runs on one of those bf16 kernels:
 *    elsewhere it runs on a kernel that widens to fp32 (the clean fallback), and the row says
 *    so instead of a target.
 * `target` is measured / required (>= 1 means the target holds) and `targetIs` names it. A row a target does not
 * name, or whose peer is missing (no OpenBLAS installed), gets no target.
 */

/** A square matmul row as the bench records it (only the fields the targets read). */
export interface MatmulRow {
  dtype: string;
  n: number;
  fastGflops: number;
  fastVsOpenblas: number | null;
  [k: string]: unknown;
}

/** What a row's target says: which ratio must reach what (`targetIs`), and measured / required (`target`). */
export interface KernelTarget {
  targetIs: string;
  /** null: the target does not apply on this CPU (targetIs says why). */
  target: number | null;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** The bf16 matmul kernels the target is stated for (setMatmulKernel()'s `bf16` names). */
export const BF16_DOT_KERNELS: readonly string[] = ['amx-bf16', 'avx512-bf16'];

/** The target of one row given its bf16/fp32 ratio (null for fp32 rows or without an fp32 row of that n). */
function targetOf(row: MatmulRow, bf16VsFp32: number | null, bf16Kernel: string): KernelTarget | null {
  if (row.dtype === 'fp32' && row.fastVsOpenblas !== null) {
    const required = row.n === 64 ? 0.8 : row.n >= 128 ? 0.95 : null;
    if (required !== null) return { targetIs: `fastVsOpenblas >= ${required}`, target: round3(row.fastVsOpenblas / required) };
  }
  if (row.dtype === 'bf16' && row.n >= 256 && bf16VsFp32 !== null) {
    if (!BF16_DOT_KERNELS.includes(bf16Kernel)) return { targetIs: `none: no AMX or AVX-512 BF16 here (bf16 runs on ${bf16Kernel})`, target: null };
    return { targetIs: 'bf16VsFp32 >= 1.5', target: round3(bf16VsFp32 / 1.5) };
  }
  return null;
}

/** The rows with `bf16VsFp32` on bf16 rows (fast GFLOP/s over the fp32 row of the same n) and `target` where one applies. */
export function withMatmulTargets<T extends MatmulRow>(
  rows: readonly T[],
  bf16Kernel: string = BF16_DOT_KERNELS[0]!,
): Array<T & { bf16VsFp32?: number } & Partial<KernelTarget>> {
  const fp32 = new Map(rows.filter((r) => r.dtype === 'fp32').map((r) => [r.n, r.fastGflops]));
  return rows.map((row) => {
    const peer = row.dtype === 'bf16' ? fp32.get(row.n) : undefined;
    const bf16VsFp32 = peer ? round3(row.fastGflops / peer) : null;
    const target = targetOf(row, bf16VsFp32, bf16Kernel);
    return { ...row, ...(bf16VsFp32 !== null ? { bf16VsFp32 } : {}), ...(target ?? {}) };
  });
}
