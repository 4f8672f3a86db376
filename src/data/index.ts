export * from './tokenizer.js';
export * from './chat-template.js';
