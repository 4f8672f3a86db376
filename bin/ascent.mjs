#!/usr/bin/env node
// `ascent trace <dir>`: see src/cli/ascent.ts.
import { runCli } from './run-cli.mjs';

await runCli('ascent.js');
