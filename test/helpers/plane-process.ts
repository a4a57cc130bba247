import { spawn, type ChildProcess } from 'node:child_process';
import { openSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort } from '../../agent/runtimes/process.js';

export interface PlaneProcess {
  url: string;
  port: number;
  process: ChildProcess;
  logFile: string;
}

/**
 * A control plane in its own process (`functions/hosts/node.ts`, as production runs it), so that a test can SIGKILL
 * it. Its output goes to `<dataDir>/plane.log`; resolves once `/readyz` answers 200.
 */
export async function spawnControlPlane(opts: { databaseUrl: string; dataDir: string; env?: Record<string, string> }): Promise<PlaneProcess> {
  const port = await freePort();
  const logFile = join(opts.dataDir, 'plane.log');
  await mkdir(opts.dataDir, { recursive: true });
  const out = openSync(logFile, 'a');
  const child = spawn(process.execPath, ['--import', 'tsx', 'functions/hosts/node.ts'], {
    cwd: join(import.meta.dirname, '..', '..'),
    env: {
      ...process.env,
      DATABASE_URL: opts.databaseUrl,
      LUNANEXA_PORT: String(port),
      LUNANEXA_DATA_DIR: opts.dataDir,
      LUNANEXA_LOG_LEVEL: 'warn',
      ...opts.env,
    },
    stdio: ['ignore', out, out],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`control plane exited with ${child.exitCode}; see ${logFile}`);
    const ready = await fetch(`${url}/readyz`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) throw new Error(`control plane not ready within 60 s; see ${logFile}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, port, process: child, logFile };
}
