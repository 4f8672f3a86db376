import { describe, expect, it } from 'vitest';
import { blasKind } from '../bench/torch-peer.js';
import { steadyMedian } from '../bench/grpo-step.js';

describe('bench PyTorch peer', () => {
  it("names the BLAS behind Debian's libblas.so.3 alternative", () => {
    expect(blasKind(['/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0'])).toBe('reference');
    expect(blasKind(['/usr/lib/x86_64-linux-gnu/openblas-serial/libblas.so.3'])).toBe('openblas');
    expect(blasKind(['/usr/lib/x86_64-linux-gnu/libopenblas.so.0', '/usr/lib/x86_64-linux-gnu/blas/libblas.so.3'])).toBe('openblas');
    expect(blasKind(['/opt/intel/mkl/lib/libmkl_rt.so.2'])).toBe('mkl');
    expect(blasKind([])).toBe('unknown');
  });

  it('takes the steady-state median over the second half of a run, none for a short run', () => {
    expect(steadyMedian(Array.from({ length: 19 }, () => 1))).toBeNull();
    // 40 steps: the first 20 slow (warm-up), the last 20 at 1..20 -> median 10.5.
    const steps = [...Array.from({ length: 20 }, () => 100), ...Array.from({ length: 20 }, (_, i) => i + 1)];
    expect(steadyMedian(steps)).toBe(10.5);
    // An odd count takes the later half (steps > n / 2).
    expect(steadyMedian([...Array.from({ length: 10 }, () => 9), ...Array.from({ length: 11 }, (_, i) => i)])).toBe(5);
  });
});
