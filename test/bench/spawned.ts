import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';

const children: ChildProcess[] = [];

/** Starts a process with its stderr appended to `logFile` (readable while it runs), stopped by `stopSpawned`. */
export function spawnLogged(command: string, args: string[], env: NodeJS.ProcessEnv, logFile: string): ChildProcess {
  const log = openSync(logFile, 'a');
  try {
    const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', log] });
    children.push(child);
    return child;
  } finally {
    closeSync(log);
  }
}

const running = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

export function exited(child: ChildProcess): Promise<unknown> {
  return running(child) ? new Promise((resolve) => child.once('exit', resolve)) : Promise.resolve();
}

/** SIGTERM to every process still running, SIGKILL to those still there after the grace period. */
export async function stopSpawned(graceMs = 3_000): Promise<void> {
  const alive = children.filter(running);
  children.length = 0;
  for (const child of alive) child.kill('SIGTERM');
  await Promise.race([Promise.all(alive.map(exited)), new Promise((r) => setTimeout(r, graceMs))]);
  for (const child of alive.filter(running)) child.kill('SIGKILL');
  await Promise.all(alive.map(exited));
}
