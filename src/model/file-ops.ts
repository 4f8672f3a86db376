/**
 * The file operations that change a checkpoint on disk, behind one seam.
 *
 * Every mutating step of a save (make a folder, create a file, write its bytes, fsync it,
 * rename, remove, fsync a folder) goes through here, so a test can stop the writer before
 * the k-th operation for every k (a crash-consistency test kills a child process from the
 * hook) and check that what is on disk is always loadable. Without a hook the wrappers are
 * the plain `node:fs/promises` calls.
 */
import { mkdir, open, rename, rm, unlink, type FileHandle } from 'node:fs/promises';

export type FileOp = 'mkdir' | 'create' | 'write' | 'fsync' | 'rename' | 'remove' | 'fsync-dir';

/** Called before each operation; it may kill the process or throw to simulate a crash. */
export type FileOpHook = (op: FileOp, path: string) => void;

let hook: FileOpHook | undefined;

/** @internal Test seam: observe (or stop) every checkpoint file operation. Pass undefined to remove. */
export function setFileOpHook(h: FileOpHook | undefined): void {
  hook = h;
}

/** Announces an operation to the hook (for writes done through a FileHandle). */
export function beforeFileOp(op: FileOp, path: string): void {
  hook?.(op, path);
}

export async function makeDir(path: string): Promise<void> {
  beforeFileOp('mkdir', path);
  await mkdir(path, { recursive: true });
}

/** Opens a new file for writing; fails if it exists. */
export async function createFile(path: string): Promise<FileHandle> {
  beforeFileOp('create', path);
  return open(path, 'wx');
}

export async function syncFile(fh: FileHandle, path: string): Promise<void> {
  beforeFileOp('fsync', path);
  await fh.sync();
}

export async function renamePath(from: string, to: string): Promise<void> {
  beforeFileOp('rename', to);
  await rename(from, to);
}

/** Removes a file or a folder tree; a missing path is not an error. */
export async function removePath(path: string): Promise<void> {
  beforeFileOp('remove', path);
  await rm(path, { recursive: true, force: true });
}

export async function removeFile(path: string): Promise<void> {
  beforeFileOp('remove', path);
  await unlink(path);
}

/** Makes renames and creations in `dir` durable; best effort (some filesystems refuse fsync on a folder). */
export async function syncDir(dir: string): Promise<void> {
  beforeFileOp('fsync-dir', dir);
  try {
    const d = await open(dir, 'r');
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    // Durability only; the operation itself already happened.
  }
}
