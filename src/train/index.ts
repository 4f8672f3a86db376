/** Public API of the training layer (strategies and their contract), re-exported by src/index.ts. */
export * from './strategy.js';
export { checkBatch, localRows, targetTokens, crossEntropyLoss } from './rows.js';
export { sumSquares, scaleInPlace, clipCoefficient } from './grad-norm.js';
export { SingleDeviceStrategy } from './single.js';
export { Fsdp2Strategy, planLayout, type Fsdp2Options, type FlatLayout, type FlatUnit, type FlatParam } from './fsdp2/index.js';
