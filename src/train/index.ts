/** Public API of the training layer (strategies and their contract), re-exported by src/index.ts. */
export * from './strategy.js';
export { checkBatch, localRows, targetTokens, crossEntropyLoss } from './rows.js';
export { sumSquares, scaleInPlace, clipCoefficient } from './grad-norm.js';
export { SingleDeviceStrategy, type SingleLoraOptions } from './single.js';
