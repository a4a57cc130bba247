import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { build, type BuildOutputs } from '../../scripts/build.mjs';
import { waitFor } from '../helpers/plane.js';
import { PG_URL, createTestDatabase } from '../helpers/pg.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Runs `command args` to completion and returns its exit code and output. */
function run(
  command: string,
  args: string[],
  opts: { cwd: string; env?: NodeJS.ProcessEnv },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const runNode = (args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }) => run(process.execPath, args, opts);

/** Starts `node args` and resolves with the first stdout line that `match` accepts (parsed as JSON). */
function startNode(
  args: string[],
  opts: { cwd: string; env?: NodeJS.ProcessEnv; match: (line: Record<string, unknown>) => boolean; timeoutMs?: number },
): Promise<{ child: ChildProcess; line: Record<string, unknown>; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? -1 : null))));
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no matching line from ${args.join(' ')} within ${opts.timeoutMs ?? 20_000} ms; stderr: ${stderr}`));
    }, opts.timeoutMs ?? 20_000);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${args.join(' ')} exited with ${code} before it was ready; stderr: ${stderr}`));
    });
    createInterface({ input: child.stdout! }).on('line', (text) => {
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(text) as Record<string, unknown>;
      } catch {
        return;
      }
      if (!opts.match(line)) return;
      clearTimeout(timer);
      resolve({ child, line, exited });
    });
  });
}

/** This process's environment without a DATABASE_URL, so the bundle really uses its embedded store. */
function planeEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  delete env.DATABASE_URL;
  return env;
}

describe('npm run build', () => {
  let outputs: BuildOutputs;
  let scratch: string;
  const children: ChildProcess[] = [];

  let outDir: string;

  beforeAll(async () => {
    // A private output folder, so that a concurrent `npm run build` or suite never reads a half-written bundle.
    // It stays inside the checkout because the control-plane bundle's embedded store resolves PGlite from
    // node_modules.
    await mkdir(join(REPO, 'dist'), { recursive: true });
    outDir = await mkdtemp(join(REPO, 'dist', '.test-'));
    outputs = await build({ outDir });
    scratch = await mkdtemp(join(tmpdir(), 'lnx-build-'));
  });

  afterAll(async () => {
    for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
    await rm(scratch, { recursive: true, force: true });
    await rm(outDir, { recursive: true, force: true });
  });

  it('writes the three bundles, and the Worker holds no Node-only store or server', async () => {
    expect(Object.keys(outputs).sort()).toEqual(['agent', 'control-plane', 'worker']);
    for (const bundle of Object.values(outputs)) expect(bundle!.bytes).toBeGreaterThan(10_000);
    const worker = await readFile(outputs.worker!.path, 'utf8');
    const plane = await readFile(outputs['control-plane']!.path, 'utf8');
    // esbuild marks each bundled module with a `// node_modules/...` comment; the Node bundle is the positive
    // control that these markers really name those packages.
    for (const marker of ['@electric-sql/pglite', 'node_modules/pg/lib/', 'node_modules/@hono/node-server/']) {
      expect(plane).toContain(marker);
      expect(worker).not.toContain(marker);
    }
    // PGlite, the one package the control plane leaves outside, is required on first use, never imported at load.
    expect(plane).not.toMatch(/^import .*["']@electric-sql\/pglite["']/m);
    // The migrations travel inside the bundle.
    expect(await readdir(outDir)).not.toContain('migrations');
    const agent = await readFile(outputs.agent!.path, 'utf8');
    expect(agent.startsWith('#!/usr/bin/env node\n')).toBe(true);
    expect((await stat(outputs.agent!.path)).mode & 0o111).not.toBe(0);
  });

  it('ships an agent that runs alone, with no node_modules beside it', async () => {
    const dir = await mkdtemp(join(scratch, 'agent-'));
    await copyFile(outputs.agent!.path, join(dir, 'lunanexa-agent.mjs'));
    const help = await runNode(['lunanexa-agent.mjs', '--help'], { cwd: dir });
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/\benroll\b/);
    expect(help.stdout).toMatch(/\brun\b/);

    const sim = await startNode(['lunanexa-agent.mjs', 'sim-runtime', '--model', 'm', '--port', '0'], {
      cwd: dir,
      match: (line) => line.event === 'listening',
    });
    children.push(sim.child);
    const port = sim.line.port as number;
    expect(port).toBeGreaterThan(0);
    const status = await waitFor(
      async () => {
        const response = await fetch(`http://127.0.0.1:${port}/health`);
        return response.status === 200 ? response.status : null;
      },
      { timeoutMs: 10_000, what: 'the simulated runtime to be healthy' },
    );
    expect(status).toBe(200);
    sim.child.kill('SIGTERM');
    await sim.exited;
  });

  it('ships a control plane that starts on an embedded store, is ready, and stops on SIGTERM', async () => {
    const dataDir = await mkdtemp(join(scratch, 'plane-'));
    // Port 0 lets the kernel pick, so no other test can take the port between choosing and binding; the
    // bundle logs the address it bound.
    const plane = await startNode([outputs['control-plane']!.path], {
      cwd: scratch,
      env: planeEnv({ LUNANEXA_DATA_DIR: dataDir, LUNANEXA_PORT: '0', LUNANEXA_SIM_NODES: '0' }),
      match: (line) => line.msg === 'control plane listening',
      timeoutMs: 30_000,
    });
    children.push(plane.child);
    expect(plane.line.store).toBe('pglite');
    const url = plane.line.url as string;
    const ready = await fetch(`${url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', migrated: true });
    plane.child.kill('SIGTERM');
    expect(await plane.exited).toBe(0);
  });

  it.skipIf(!PG_URL)('ships a control plane that runs on DATABASE_URL alone, with no node_modules or migrations beside it', async () => {
    const dir = await mkdtemp(join(scratch, 'plane-alone-'));
    await copyFile(outputs['control-plane']!.path, join(dir, 'control-plane.mjs'));
    const db = await createTestDatabase();
    try {
      // Only what an operator sets: the database, and port 0 so the kernel picks a free one the bundle logs.
      const plane = await startNode(['control-plane.mjs'], {
        cwd: dir,
        env: { PATH: process.env.PATH, DATABASE_URL: db.url, LUNANEXA_PORT: '0' },
        match: (line) => line.msg === 'control plane listening',
        timeoutMs: 30_000,
      });
      children.push(plane.child);
      expect(plane.line.store).toBe('pg');
      const url = plane.line.url as string;
      const ready = await fetch(`${url}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({ status: 'ready', store: 'pg', migrated: true });
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      plane.child.kill('SIGTERM');
      expect(await plane.exited).toBe(0);
    } finally {
      await db.drop();
    }
  });
});

describe('the lunanexa-agent bin in a checkout', () => {
  // Without proxy variables, so that the refused connection below is the agent's own, not a proxy's.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/_proxy$/i.test(name)));
  const npmExec = (args: string[]) => run('npm', ['exec', '--offline', 'lunanexa-agent', '--', ...args], { cwd: REPO, env });

  it('runs the agent from source with no build step', async () => {
    const help = await npmExec(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: lunanexa-agent');
    expect(help.stdout).toMatch(/^\s+enroll\b/m);
    expect(help.stdout).toMatch(/^\s+run\b/m);
  });

  it('says which control plane it cannot reach when enrolling', async () => {
    const server = createServer();
    const port = await new Promise<number>((done) => server.listen(0, '127.0.0.1', () => done((server.address() as { port: number }).port)));
    await new Promise((done) => server.close(done));
    const stateDir = await mkdtemp(join(tmpdir(), 'lnx-bin-'));
    const tokenFile = join(stateDir, 'token');
    await writeFile(tokenFile, 'not-a-real-token', { mode: 0o600 });
    try {
      const url = `http://127.0.0.1:${port}`;
      const enroll = await npmExec(['enroll', '--url', url, '--token-file', tokenFile, '--name', 'spark-01', '--state-dir', stateDir]);
      expect(enroll.code).toBe(1);
      expect(enroll.stderr).toContain(`cannot reach the control plane at ${url}: connection refused (ECONNREFUSED)`);
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
