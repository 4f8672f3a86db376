// Shared start-up of the package's bins: load the built CLI, run it, exit with its code.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export async function runCli(file) {
  const url = new URL(`../dist/src/cli/${file}`, import.meta.url);
  if (!existsSync(fileURLToPath(url))) {
    process.stderr.write(`ascent: ${fileURLToPath(url)} is missing. HINT: run \`npm install\` (or \`npm run build\`) in the Ascent checkout.\n`);
    process.exit(2);
  }
  let code;
  try {
    // Importing reads environment switches too (a bad one is a ConfigError): inside the try.
    const { main } = await import(url.href);
    code = await main(process.argv.slice(2));
  } catch (err) {
    // Bad input is one line (exit 2); anything else keeps its stack (exit 1), never Node's raw dump.
    const name = file.replace(/\.js$/, '');
    if (err?.code === 'ASCENT_CONFIG' || err?.code === 'ASCENT_INVALID_ARGUMENT') {
      process.stderr.write(`${name}: ${err.message}\n`);
      code = 2;
    } else {
      process.stderr.write(`${name}: ${err?.stack ?? String(err)}\n`);
      code = 1;
    }
  }
  process.exitCode = code;
  // Every thread should be gone now; if something still holds the loop, say so rather than hang.
  setTimeout(() => {
    process.stderr.write(
      `[${file.replace(/\.js$/, '')}] exiting with code ${code}, but handles were still open: ${process.getActiveResourcesInfo().join(', ')}\n`,
    );
    process.exit(code);
  }, 3000).unref();
}
