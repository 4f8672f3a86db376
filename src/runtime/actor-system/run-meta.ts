/**
 * Facts about the machine and the code a run or a benchmark ran on, recorded beside its
 * results so that runs compare: date, git commit (when the package is a git checkout),
 * Ascent and Node versions, CPU model, cores, load average.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { arch, cpus, hostname, loadavg, platform } from 'node:os';
import { PACKAGE_ROOT } from '../paths.js';

export interface GitInfo {
  commit: string;
  /** Uncommitted changes in the working tree when the run started. */
  dirty: boolean;
}

export interface RunMeta {
  date: string;
  git: GitInfo | null;
  versions: { ascent: string; node: string };
  host: { hostname: string; platform: string; arch: string; cpuModel: string; cores: number };
  /** 1, 5 and 15 minute load averages when the metadata was taken. */
  loadAvg: number[];
}

function git(args: string[]): string | null {
  try {
    // A bounded wait: git answers in milliseconds, or is missing.
    return execFileSync('git', ['-C', PACKAGE_ROOT, ...args], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

/** The checkout's commit and whether it has uncommitted changes; null outside a git checkout. */
export function gitInfo(): GitInfo | null {
  const commit = git(['rev-parse', 'HEAD']);
  if (!commit || !/^[0-9a-f]{40}$/.test(commit)) return null;
  const status = git(['status', '--porcelain', '--untracked-files=no']);
  return { commit, dirty: status !== null && status.length > 0 };
}

export function ascentVersion(): string {
  try {
    return (JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

export function runMeta(): RunMeta {
  const cpu = cpus();
  return {
    date: new Date().toISOString(),
    git: gitInfo(),
    versions: { ascent: ascentVersion(), node: process.version },
    host: { hostname: hostname(), platform: platform(), arch: arch(), cpuModel: cpu[0]?.model.trim() ?? 'unknown', cores: cpu.length },
    loadAvg: loadavg().map((l) => Math.round(l * 100) / 100),
  };
}
