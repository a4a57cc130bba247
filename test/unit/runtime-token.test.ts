import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AgentPolicy } from '../../agent/policy.js';
import { runtimeUsers, type RuntimeUsers } from '../../agent/runtime-user.js';
import type { RuntimeAdapter, RuntimeHandle } from '../../agent/runtimes/adapter.js';
import { createAdapters } from '../../agent/runtimes/adapters.js';
import { executableDigest } from '../../agent/runtimes/files.js';
import { ensureStateDir } from '../../agent/state.js';
import type { Assignment } from '../../shared/contracts/desired.js';

/**
 * Runtimes listen on loopback, where any local process (another runtime, another user on the node) reaches them:
 * each launch gets a random token, and a runtime that checks it (the simulator does) answers only the agent.
 */
const MODEL = 'sim/token-test';
const simMain = fileURLToPath(new URL('../../sim/main.ts', import.meta.url));
const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
// By URL, not by name: a template runtime runs in `/`, where `--import tsx` would not resolve.
const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const chat = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });

const children: ChildProcess[] = [];
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** The simulator as its own program, as a node runs it, with `env` added to its environment. */
async function simProgram(env: Record<string, string>): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', simMain, '--model', MODEL, '--port', '0'], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`exited early with ${code}`)));
  });
  return `http://127.0.0.1:${(JSON.parse(line) as { port: number }).port}`;
}

const post = (url: string, headers: Record<string, string> = {}) =>
  fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: chat });

describe('the simulated runtime checks the token in its environment', () => {
  it('answers a direct call without the token, or with another, 401 in the OpenAI error shape', async () => {
    const url = await simProgram({ LUNANEXA_RUNTIME_TOKEN: 'the-agents-secret' });
    const refused: Array<Record<string, string>> = [{}, { authorization: 'Bearer not-the-secret' }, { authorization: 'Basic the-agents-secret' }];
    for (const headers of refused) {
      const response = await post(url, headers);
      expect(response.status).toBe(401);
      expect(response.headers.get('www-authenticate')).toBe('Bearer');
      expect(await response.json()).toEqual({
        error: { message: 'missing or invalid bearer token', type: 'invalid_request_error', code: 'invalid_api_key', param: null },
      });
    }
    // Every route: its health, models and counters tell nothing to a stranger either.
    for (const path of ['/health', '/v1/models', '/sim/stats']) expect((await fetch(`${url}${path}`)).status).toBe(401);
    expect((await post(url, { authorization: 'Bearer the-agents-secret' })).status).toBe(200);
    expect((await fetch(`${url}/health`, { headers: { authorization: 'Bearer the-agents-secret' } })).status).toBe(200);
  });

  it('answers everyone when its environment carries no token (started by hand, or by an older agent)', async () => {
    const url = await simProgram({ LUNANEXA_RUNTIME_TOKEN: '' });
    expect((await post(url)).status).toBe(200);
  });
});

describe("the agent's runtime calls carry the launch's token", () => {
  const root = process.getuid?.() === 0;
  const policy = AgentPolicy.parse({ templates: { sim: { executable: process.execPath } }, ...(root ? { runAs: { user: 'nobody' } } : {}) });
  let users: RuntimeUsers | null;
  let nodeSha256: string;
  beforeAll(async () => {
    nodeSha256 = await executableDigest(process.execPath);
    users = await runtimeUsers(policy, root);
  });

  /** An agent's adapter on `stateDir` (a second one is the agent started again). */
  const adapterOn = (stateDir: string): RuntimeAdapter => createAdapters({ stateDir, policy, users, log: () => {} }).template;
  const assignment = (): Assignment => ({
    assignmentId: 'asg_tok',
    deploymentId: 'dep_tok',
    deploymentName: 'tok',
    model: MODEL,
    deploymentGeneration: 1,
    runtime: {
      kind: 'template',
      template: 'sim',
      executable: process.execPath,
      executableSha256: nodeSha256,
      args: ['--import', tsxLoader, simMain, '--port', '{port}', '--instance-id', '{instance}', '--model', MODEL],
      env: {},
      healthPath: '/health',
    },
    artifact: null,
    restartPolicy: { mode: 'never', maxRestarts: 0, backoffMs: 100 },
    resources: { gpus: 0, memoryMiB: 1 },
    startup: { timeoutMs: 60_000, probeIntervalMs: 100, failureThreshold: 3 },
    templateHash: 'template-sim',
  });

  async function untilReady(adapter: RuntimeAdapter, handle: RuntimeHandle): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (!(await adapter.ready(handle))) {
      if (!adapter.alive(handle) || Date.now() > deadline) throw new Error('the runtime never got ready');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  const invoke = async (adapter: RuntimeAdapter, handle: RuntimeHandle, headers: Record<string, string> = {}) => {
    const response = await adapter.invoke(handle, '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: chat,
    });
    response.body.resume();
    return response.status;
  };

  it('launches each runtime with a random token only the agent presents, kept in its record for adoption', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'lnx-token-'));
    await ensureStateDir(stateDir);
    const adapter = adapterOn(stateDir);
    let handle: RuntimeHandle | null = null;
    cleanups.push(async () => {
      if (handle) await adapter.stop(handle);
      await rm(stateDir, { recursive: true, force: true });
    });
    handle = await adapter.start(assignment());
    expect(handle.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await untilReady(adapter, handle);

    // The runtime has it in its environment; a direct call without it is refused, the agent's own calls are not.
    expect((await readFile(`/proc/${handle.pid}/environ`, 'utf8')).split('\0')).toContain(`LUNANEXA_RUNTIME_TOKEN=${handle.token}`);
    expect((await post(handle.baseUrl)).status).toBe(401);
    expect(await invoke(adapter, handle)).toBe(200);
    // A caller's own credential is never passed on in place of the agent's.
    expect(await invoke(adapter, handle, { Authorization: 'Bearer forged' })).toBe(200);

    // An agent started again adopts the runtime with its token, from the record.
    const record = JSON.parse(await readFile(join(stateDir, 'runtimes', 'asg_tok.json'), 'utf8')) as { token: string };
    expect(record.token).toBe(handle.token);
    const restarted = adapterOn(stateDir);
    const adopted = await restarted.inspect(assignment());
    expect(adopted).toEqual({ handle, ready: true });
    expect(await invoke(restarted, adopted!.handle)).toBe(200);

    // Another launch, another token.
    const next = await adapter.start(assignment());
    handle = next;
    expect(next.token).not.toBe(record.token);
  });
});
