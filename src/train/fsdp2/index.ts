/** Public API of the fsdp2 strategy (re-exported by src/train/index.ts). */
export { Fsdp2Strategy, type Fsdp2Options, type Fsdp2LoraOptions } from './strategy.js';
export { planLayout, type FlatLayout, type FlatUnit, type FlatParam } from './layout.js';
