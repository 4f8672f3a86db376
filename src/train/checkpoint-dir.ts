/**
 * The on-disk layout of a training-checkpoint root and its crash safety:
 *
 *   root/step-000010/   a complete step folder (only ever created by one rename)
 *   root/latest         the name of the newest complete step folder
 *   root/.tmp-step-…    a save in progress (or crashed): never loaded, removed by the next save
 *   root/.old-step-…    the previous copy of a step being re-saved, until the new one is in place
 *   root/.latest.tmp-…  a `latest` being replaced (or crashed): removed by the next save
 *
 * A save fills a `.tmp-` folder, moves an existing folder of the same step aside to `.old-`,
 * renames the new folder into place, replaces `latest` (temp file + rename) and only then
 * removes `.old-`. So before every file operation of a save (the crash test kills the writer
 * there, through model/file-ops.ts) `latest` names a complete copy: the folder itself or, in
 * the window of a re-save of that very step, its `.old-` copy, which the loader falls back to
 * and the next save renames back. The next save never deletes the only complete copy.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { CheckpointFormatError } from '../runtime/errors.js';
import { makeDir, removePath, renamePath, syncDir } from '../model/file-ops.js';
import { atomicTempPrefix, atomicWrite } from '../model/safetensors.js';

export const LATEST_FILE = 'latest';
const STEP_DIR = /^step-(\d{6,})$/;
/** Unfinished step folders of a save in progress (or crashed). */
const TMP_PREFIX = '.tmp-';
/** The previous copy of a step being re-saved, until the new one is in place. */
const OLD_PREFIX = '.old-';

export const stepDirName = (step: number): string => `step-${String(step).padStart(6, '0')}`;

/**
 * Writes step `step` under `root`: `fill` writes the files into a fresh temporary folder,
 * which is then published as `step-NNNNNN` and named by `latest`. Returns the step folder.
 */
export async function publishStep(root: string, step: number, fill: (tmp: string) => Promise<void>): Promise<string> {
  await makeDir(root);
  await recoverRoot(root);
  const name = stepDirName(step);
  const final = join(root, name);
  const tmp = join(root, `${TMP_PREFIX}${name}-${process.pid}-${Date.now()}`);
  await makeDir(tmp);
  await fill(tmp);
  await syncDir(tmp);
  // Re-saving a step that exists (perhaps the one `latest` names): move the complete old copy
  // aside under a fixed name first (see the file comment).
  const old = join(root, `${OLD_PREFIX}${name}`);
  const had = await exists(final);
  if (had) await renamePath(final, old);
  await renamePath(tmp, final);
  await syncDir(root);
  await atomicWrite(join(root, LATEST_FILE), async (fh) => {
    const body = new TextEncoder().encode(`${name}\n`);
    await fh.write(body, 0, body.length, 0);
  });
  if (had) await removePath(old);
  return final;
}

/**
 * Repairs what a crashed save left in `root`, before a new save: a `.old-<step>` whose step
 * folder is missing is the only complete copy of that step and is renamed back; one whose
 * step folder exists is stale (the new copy was in place) and is removed. Then unfinished
 * `.tmp-*` step folders and `.latest.tmp-*` files are removed.
 */
async function recoverRoot(root: string): Promise<void> {
  const names = await readdir(root);
  for (const n of names) {
    if (!n.startsWith(OLD_PREFIX)) continue;
    const step = n.slice(OLD_PREFIX.length);
    if (!STEP_DIR.test(step)) continue;
    if (await exists(join(root, step))) await removePath(join(root, n));
    else await renamePath(join(root, n), join(root, step));
  }
  const latestTmp = atomicTempPrefix(join(root, LATEST_FILE));
  for (const n of names) {
    if (n.startsWith(TMP_PREFIX) || n.startsWith(latestTmp)) await removePath(join(root, n));
  }
}

/** A small JSON file, written atomically. */
export async function writeJson(path: string, value: unknown): Promise<void> {
  const body = new TextEncoder().encode(`${JSON.stringify(value, null, 2)}\n`);
  await atomicWrite(path, async (fh) => {
    await fh.write(body, 0, body.length, 0);
  });
}

/** Whether `path` exists (any kind of file). */
export async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/** The newest complete step folder under `root` (by `latest`), or null when there is none. */
export async function latestCheckpoint(root: string): Promise<string | null> {
  let name: string;
  try {
    name = (await readFile(join(root, LATEST_FILE), 'utf8')).trim();
  } catch {
    return null;
  }
  if (!STEP_DIR.test(name))
    throw new CheckpointFormatError(`${join(root, LATEST_FILE)} names ${JSON.stringify(name)}; expected a step folder like step-000010.`, {
      file: join(root, LATEST_FILE),
    });
  // A save that crashed while re-saving this very step left its complete copy under `.old-<step>`.
  if (!(await exists(join(root, name))) && (await exists(join(root, `${OLD_PREFIX}${name}`)))) return join(root, `${OLD_PREFIX}${name}`);
  return join(root, name);
}
