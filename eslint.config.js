// Lint rules for src/, bench/, test/ and scripts (npm run lint; run by `npm test` through
// test/lint.test.ts). Formatting is Prettier's job (npm run format:check); the rules here
// catch bugs and dead code, not style.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'build/**', 'node_modules/**', 'native/**', '**/*.d.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        setImmediate: 'readonly',
        queueMicrotask: 'readonly',
        URL: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        structuredClone: 'readonly',
        performance: 'readonly',
        SharedArrayBuffer: 'readonly',
        Atomics: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        globalThis: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Prettier wraps code at 160 columns; comments must fit too. Long strings, templates and regexps
      // (error messages, test names, expected texts) stay whole so they can be searched for.
      'max-len': ['error', { code: 160, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true, ignoreUrls: true }],
    },
  },
  // Tests reach into results and internals loosely on purpose.
  { files: ['test/**'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
);
