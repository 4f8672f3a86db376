/**
 * Ascent's layering, enforced by `npm run lint:deps` (and by `npm test`, through
 * test/layers.test.ts). A module may import only from its own layer or the layers
 * listed before it:
 *
 *   runtime ← model ← parallel ← train | rollout ← data ← sync ← actors ← grpo ← cli ← src/index.ts, src/internal.ts
 *
 * and inside runtime: core (the files directly in src/runtime) ← device ← comm ← actor-system.
 *
 * train and rollout sit side by side and must not import each other; data (the
 * dataset layer) may import only runtime and model. Import cycles of runtime values
 * are forbidden everywhere (type-only imports may point back). bench/, examples/ and test/
 * sit on top and are not checked.
 */
const ORDER = ['runtime', 'model', 'parallel', ['train', 'rollout'], 'data', 'sync', 'actors', 'grpo', 'cli'];

const rank = new Map();
ORDER.forEach((entry, i) => (Array.isArray(entry) ? entry : [entry]).forEach((name) => rank.set(name, i)));
const layers = [...rank.keys()];
const dir = (names) => `^src/(${names.join('|')})/`;

const upward = layers
  .map((name) => ({ name, above: layers.filter((other) => rank.get(other) > rank.get(name)) }))
  .filter(({ above }) => above.length > 0)
  .map(({ name, above }) => ({
    name: `layer-${name}-imports-upward`,
    comment: `src/${name} may import only its own layer and the ones below it (${ORDER.flat().slice(0, ORDER.flat().indexOf(name)).join(', ') || 'none'}). HINT: move the shared code down, or pass it in (a registry, an option, a module spec).`,
    severity: 'error',
    from: { path: `^src/${name}/` },
    to: { path: dir(above) },
  }));

module.exports = {
  forbidden: [
    ...upward,
    {
      name: 'train-rollout-side-by-side',
      comment: 'src/train and src/rollout are siblings and must not import each other. HINT: move what both need down to src/model or src/parallel.',
      severity: 'error',
      from: { path: '^src/(train|rollout)/' },
      to: { path: '^src/(train|rollout)/', pathNot: '^src/$1/' },
    },
    {
      name: 'data-imports-runtime-and-model-only',
      comment: 'src/data may import only src/runtime and src/model. HINT: keep datasets independent of strategies, engines and sync.',
      severity: 'error',
      from: { path: '^src/data/' },
      to: { path: '^src/', pathNot: '^src/(runtime|model|data)/' },
    },
    {
      name: 'no-import-of-the-public-face',
      comment: 'src/index.ts and src/internal.ts are the top of the package: nothing inside src/ imports them. HINT: import the module that defines the name.',
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/(index|internal)\\.ts$' },
      to: { path: '^src/(index|internal)\\.ts$' },
    },
    {
      name: 'sync-loads-no-strategy-code',
      comment:
        "Weight sync plans from the strategies' published weight sources (src/parallel/weight-sources.ts): it may import train types only, so an engine rank never loads src/train (a trainer-only step may load it lazily with import()). HINT: publish what sync needs through weightSources() or move it down.",
      severity: 'error',
      from: { path: '^src/sync/' },
      to: { path: '^src/train/', dependencyTypesNot: ['type-only', 'dynamic-import'] },
    },
    {
      name: 'runtime-core-imports-nothing-above',
      comment:
        'The files directly in src/runtime (errors, env, config, logger, paths, patches, native, profiler) sit below device/, comm/ and actor-system/. HINT: move the shared piece down, or pass it in.',
      severity: 'error',
      from: { path: '^src/runtime/[^/]+$' },
      to: { path: '^src/runtime/(device|comm|actor-system)/' },
    },
    {
      name: 'runtime-device-below-comm-and-actors',
      comment: 'src/runtime/device may import only the runtime core and itself (comm and the actor system sit above it).',
      severity: 'error',
      from: { path: '^src/runtime/device/' },
      to: { path: '^src/runtime/(comm|actor-system)/' },
    },
    {
      name: 'runtime-comm-below-actors',
      comment: 'src/runtime/comm may import the runtime core and device, not the actor system.',
      severity: 'error',
      from: { path: '^src/runtime/comm/' },
      to: { path: '^src/runtime/actor-system/' },
    },
    {
      name: 'no-circular',
      comment:
        'No import cycles of runtime values (type-only imports are erased and may point back). HINT: move the shared piece into a leaf module both import, as src/runtime/device/options.ts does for device, stream and event.',
      severity: 'error',
      from: { path: '^src/' },
      to: { circular: true, viaOnly: { dependencyTypesNot: ['type-only'] } },
    },
  ],
  options: {
    includeOnly: '^src/',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
