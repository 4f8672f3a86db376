export * from './tokenizer.js';
export * from './chat-template.js';
export * from './config.js';
export * from './readers.js';
export * from './dataset.js';
export * from './reward-types.js';
export * from './rewards.js';
export * as builtinRewards from './builtin-rewards.js';
export * as syntheticTask from './synthetic-task.js';
