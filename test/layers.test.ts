// Downward imports only (.dependency-cruiser.cjs): `npm test` fails with dependency-cruiser's
// report when a module imports a layer above its own, train and rollout import each other, or
// runtime values form an import cycle. A planted violation proves the rules can fail.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DEPCRUISE = join(ROOT, 'node_modules', 'dependency-cruiser', 'bin', 'dependency-cruise.mjs');

function cruise(cwd: string, ...paths: string[]): { status: number | null; report: string } {
  const r = spawnSync(process.execPath, [DEPCRUISE, '--config', join(ROOT, '.dependency-cruiser.cjs'), '--output-type', 'err', ...paths], {
    cwd,
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, report: `${r.stdout}${r.stderr}` };
}

describe('layering', () => {
  it('src/ imports only downward (npm run lint:deps)', () => {
    const r = cruise(ROOT, 'src');
    expect(r.report, r.report).toMatch(/no dependency violations found/);
    expect(r.status, r.report).toBe(0);
  });

  it('reports upward imports, train ↔ rollout and value cycles', () => {
    // The violations are planted in a throw-away tree shaped like the repository (the rules' paths
    // are relative to it) and checked with the real rules. Nothing is written under src/: test files
    // running at the same time would see the planted files (eslint, prettier, the dist/ freshness checks).
    const tree = mkdtempSync(join(tmpdir(), 'ascent-layers-'));
    const put = (file: string, text: string) => {
      mkdirSync(dirname(join(tree, file)), { recursive: true });
      writeFileSync(join(tree, file), text);
    };
    try {
      copyFileSync(join(ROOT, 'tsconfig.json'), join(tree, 'tsconfig.json'));
      put('src/grpo/loss.ts', 'export const loss = 1;\n');
      put('src/rollout/index.ts', 'export const engine = 1;\n');
      put('src/model/__layers_probe__/up.ts', "export * from '../../grpo/loss.js';\n");
      put('src/model/__layers_probe__/a.ts', "import { b } from './b.js';\nexport const a = (): number => b + 1;\n");
      put('src/model/__layers_probe__/b.ts', "import { a } from './a.js';\nexport const b = 1;\nexport const c = a;\n");
      put('src/train/__layers_probe__.ts', "export * from '../rollout/index.js';\n");
      const r = cruise(tree, 'src/model/__layers_probe__', 'src/train/__layers_probe__.ts');
      expect(r.status, r.report).not.toBe(0);
      expect(r.report).toContain('layer-model-imports-upward');
      expect(r.report).toContain('train-rollout-side-by-side');
      expect(r.report).toContain('no-circular');
    } finally {
      rmSync(tree, { recursive: true, force: true });
    }
  });
});
