#!/usr/bin/env node
// `launch --nproc N entry.ts`: see src/cli/launch.ts.
import { runCli } from './run-cli.mjs';

await runCli('launch.js');
