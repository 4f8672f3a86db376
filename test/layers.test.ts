// Downward imports only (.dependency-cruiser.cjs): `npm test` fails with dependency-cruiser's
// report when a module imports a layer above its own, train and rollout import each other, or
// runtime values form an import cycle. A planted violation proves the rules can fail.
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DEPCRUISE = join(ROOT, 'node_modules', 'dependency-cruiser', 'bin', 'dependency-cruise.mjs');

function cruise(...paths: string[]): { status: number | null; report: string } {
  const r = spawnSync(process.execPath, [DEPCRUISE, '--config', '.dependency-cruiser.cjs', '--output-type', 'err', ...paths], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, report: `${r.stdout}${r.stderr}` };
}

describe('layering', () => {
  it('src/ imports only downward (npm run lint:deps)', () => {
    const r = cruise('src');
    expect(r.report, r.report).toMatch(/no dependency violations found/);
    expect(r.status, r.report).toBe(0);
  });

  it('reports upward imports, train ↔ rollout and value cycles', () => {
    // A throw-away folder under src/ (removed afterwards), so the rules' paths apply to it.
    const dir = join(ROOT, 'src', 'model', '__layers_probe__');
    const train = join(ROOT, 'src', 'train', '__layers_probe__.ts');
    mkdirSync(dir, { recursive: true });
    try {
      writeFileSync(join(dir, 'up.ts'), "export * from '../../grpo/loss.js';\n");
      writeFileSync(join(dir, 'a.ts'), "import { b } from './b.js';\nexport const a = (): number => b + 1;\n");
      writeFileSync(join(dir, 'b.ts'), "import { a } from './a.js';\nexport const b = 1;\nexport const c = a;\n");
      writeFileSync(train, "export * from '../rollout/index.js';\n");
      const r = cruise('src/model/__layers_probe__', 'src/train/__layers_probe__.ts');
      expect(r.status, r.report).not.toBe(0);
      expect(r.report).toContain('layer-model-imports-upward');
      expect(r.report).toContain('train-rollout-side-by-side');
      expect(r.report).toContain('no-circular');
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(train, { force: true });
    }
  });
});
