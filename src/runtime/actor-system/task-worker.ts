/** Piscina worker: runs one exported function of a user module per task. */
import { importModule } from './module-loader.js';

interface Task {
  moduleUrl: string;
  exportName: string;
  arg: unknown;
}

export default async function runTask(task: Task): Promise<unknown> {
  const mod = await importModule(task.moduleUrl);
  const fn = mod[task.exportName];
  if (typeof fn !== 'function') {
    throw new TypeError(
      `Module ${task.moduleUrl} has no exported function ${JSON.stringify(task.exportName)} (it exports: ${Object.keys(mod).join(', ') || 'nothing'}).`,
    );
  }
  return (fn as (a: unknown) => unknown)(task.arg);
}
