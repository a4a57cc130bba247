import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../agent/runtimes/process.js';
import { waitForExit } from '../../functions/hosts/dev/fleet.js';
import { waitFor } from './plane.js';

export interface NpmStart {
  /** The launcher's process (npm), whose descendants are the plane, the agents and their runtimes. */
  pid: number;
  dataDir: string;
  url: string;
  token: string;
  /** What it printed so far. */
  output(): string;
  /** Calls the management API as the admin. */
  admin(path: string, init?: RequestInit): Promise<Response>;
  /** Ctrl-C, then its data directory removed. */
  stop(): Promise<void>;
}

/**
 * `npm start` as a user runs it, on a fresh data directory with `env` added, once it printed `ready` (by default:
 * that its simulated nodes are ready): its own process group, so that stopping it is what Ctrl-C in a terminal does.
 */
export async function startNpmStart(env: NodeJS.ProcessEnv = {}, ready = /simulated nodes ready/): Promise<NpmStart> {
  const dataDir = await mkdtemp(join(tmpdir(), 'lnx-start-'));
  const port = await freePort();
  const child = spawn('npm', ['start'], {
    cwd: process.cwd(),
    env: { ...process.env, LUNANEXA_DATA_DIR: dataDir, LUNANEXA_PORT: String(port), LUNANEXA_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGINT');
    await waitForExit(child, 30_000);
    await waitFor(async () => output.includes('stopped cleanly') || child.exitCode !== null, { timeoutMs: 30_000, what: 'orderly stop' }).catch(() => {});
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    const token = await waitFor(async () => (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim() || null, { timeoutMs: 60_000, what: 'admin.token' });
    await waitFor(async () => ready.test(output), { timeoutMs: 90_000, intervalMs: 20, what: 'the ready line' });
    const url = `http://127.0.0.1:${port}`;
    const admin = (path: string, init: RequestInit = {}) =>
      fetch(`${url}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...init.headers } });
    return { pid: child.pid!, dataDir, url, token, output: () => output, admin, stop };
  } catch (error) {
    await stop();
    throw new Error(`npm start did not get ready: ${error instanceof Error ? error.message : String(error)}\n${output}`);
  }
}
