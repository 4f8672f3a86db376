// The public face (src/index.ts) is a deliberate list: adding or removing a name means updating
// EXPECTED here, and the list may not grow past MAX_PUBLIC. Everything else is reachable through
// 'ascent/internal' (src/internal.ts), which the built package exports for tests, bench and tools.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MAX_PUBLIC = 100;

// Values and types together, sorted.
const EXPECTED = [
  'ActorAbortedError',
  'ActorDiedError',
  'ActorMesh',
  'ActorRef',
  'ActorSpec',
  'ActorTimeoutError',
  'AscentError',
  'CallOptions',
  'CheckpointFormatError',
  'CollectiveMismatchError',
  'CollectiveTimeoutError',
  'ColocateSync',
  'CommAbortedError',
  'Communicator',
  'ConfigError',
  'DTensor',
  'DType',
  'Device',
  'DeviceMesh',
  'DeviceOOMError',
  'ENV_VARS',
  'Event',
  'Fsdp2Strategy',
  'GrpoConfig',
  'GrpoConfigInput',
  'GrpoConfigSchema',
  'InvalidArgumentError',
  'LaunchOptions',
  'Logger',
  'LoraConfigSchema',
  'LossFn',
  'MegatronStrategy',
  'ModelConfig',
  'OptimizerConfigSchema',
  'P2PDeadlockError',
  'Partial',
  'Placement',
  'Qwen3Model',
  'RankActors',
  'RankContext',
  'RankFailedError',
  'ReduceOp',
  'RemoteError',
  'Replicate',
  'RolloutActor',
  'RolloutEngine',
  'SamplingParams',
  'ServerSync',
  'Shard',
  'SingleDeviceStrategy',
  'Stream',
  'StreamError',
  'SupervisedTrainer',
  'SyncActor',
  'SyncReport',
  'TaskPool',
  'Tensor',
  'TimeoutError',
  'TrainBatch',
  'TrainStrategy',
  'TrainerActor',
  'TrainerConfig',
  'TrainerConfigInput',
  'TrainerConfigSchema',
  'VerifyOptions',
  'WeightLayoutError',
  'WeightSyncError',
  'World',
  'WorldOptions',
  'add',
  'arange',
  'axpy',
  'cast',
  'checkGrpoArgs',
  'configureDevice',
  'copy',
  'copyPeer',
  'cosineLr',
  'createStrategy',
  'fill',
  'grpoMain',
  'isAscentError',
  'latestCheckpoint',
  'launch',
  'loadCheckpoint',
  'loadModelConfig',
  'matmul',
  'mul',
  'parseGrpoConfig',
  'parseModelConfig',
  'permute',
  'readRunLog',
  'registerLoss',
  'registerRemoteErrorClass',
  'runGrpo',
  'saveCheckpoint',
  'scale',
  'syntheticTask',
  'trainerActorSpec',
  'transpose',
];

/** Every name src/index.ts exports (values and types), from the TypeScript checker. */
function exportedNames(file: string): string[] {
  const program = ts.createProgram([file], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    types: ['node'],
    skipLibCheck: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  if (!source) throw new Error(`TypeScript could not load ${file}`);
  const mod = checker.getSymbolAtLocation(source);
  if (!mod) throw new Error(`${file} is not a module`);
  return checker
    .getExportsOfModule(mod)
    .map((s) => s.name)
    .sort();
}

/** The runtime export names of a package specifier, imported by a plain node process in the repository (package self-reference, dist/). */
function runtimeNames(specifier: string): string[] {
  const r = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `const m = await import(${JSON.stringify(specifier)}); console.log(JSON.stringify(Object.keys(m).sort()));`],
    {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim()) as string[];
}

describe('public API', () => {
  it('src/index.ts exports exactly the expected names, no more than MAX_PUBLIC', () => {
    const names = exportedNames(join(ROOT, 'src', 'index.ts'));
    expect(EXPECTED.length).toBeLessThanOrEqual(MAX_PUBLIC);
    const added = names.filter((n) => !EXPECTED.includes(n));
    const removed = EXPECTED.filter((n) => !names.includes(n));
    expect({ added, removed }, 'update EXPECTED in test/public-api.test.ts deliberately (and keep it small)').toEqual({ added: [], removed: [] });
    expect(new Set(names).size).toBe(EXPECTED.length);
  });

  it("the built 'ascent' exposes only listed values; 'ascent/internal' adds the internals", () => {
    const pub = runtimeNames('ascent');
    expect(pub.filter((n) => !EXPECTED.includes(n))).toEqual([]);
    expect(pub).toEqual(expect.arrayContaining(['World', 'Tensor', 'Communicator', 'runGrpo', 'registerLoss']));
    const internal = runtimeNames('ascent/internal');
    expect(internal.filter((n) => !pub.includes(n)).length).toBeGreaterThan(50);
    // Public values stay reachable internally, and internals are not public.
    expect(pub.filter((n) => !internal.includes(n))).toEqual([]);
    for (const name of ['paramSpecs', 'rowLogprobs', 'lossByName', 'kernels', 'PACKAGE_ROOT', 'planBuckets']) {
      expect(internal, name).toContain(name);
      expect(pub, name).not.toContain(name);
    }
  });
});
