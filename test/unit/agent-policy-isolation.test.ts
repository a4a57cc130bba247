import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AgentPolicy } from '../../agent/policy.js';
import { runtimeUsers, type RuntimeUsers } from '../../agent/runtime-user.js';
import type { RuntimeAdapter, RuntimeHandle } from '../../agent/runtimes/adapter.js';
import { createAdapters } from '../../agent/runtimes/adapters.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { IDLE } from '../../agent/supervisor/plan.js';
import { Supervisor } from '../../agent/supervisor/supervisor.js';
import { ensureStateDir, generateMachineKey, saveKey } from '../../agent/state.js';
import type { Assignment, TemplateRuntime } from '../../shared/contracts/desired.js';
import type { RuntimeReport } from '../../shared/contracts/heartbeat.js';

/**
 * The node decides what it runs: a signed assignment outside the local policy starts nothing and is reported
 * failed for good; what does run gets a minimal environment and, when the agent is root, an unprivileged user
 * that cannot read the agent's key.
 */

const root = process.getuid?.() === 0;
const digestOf = async (path: string) =>
  createHash('sha256')
    .update(await readFile(path))
    .digest('hex');
const digests: Record<string, string> = {};

/** A throwaway system user for the runtimes of this file (root only: only root can switch to it). */
const runtimeUserName = `lnxrt${randomBytes(4).toString('hex')}`;

let stateDir: string;
let keyPath: string;
let keyText: string;
const logged: Array<{ event: string; fields: Record<string, unknown> }> = [];
const log = (event: string, fields: Record<string, unknown> = {}) => void logged.push({ event, fields });
const handles: RuntimeHandle[] = [];

const TEMPLATES = {
  cat: { executable: '/bin/cat' },
  env: { executable: '/usr/bin/env', env: ['ALLOWED_VAR'] },
  id: { executable: '/usr/bin/id' },
  sleep: { executable: '/usr/bin/sleep' },
};

/** The policy of these tests: the given templates and settings, and a runtime user when the agent runs as root. */
const policyOf = (input: Record<string, unknown> = {}) =>
  AgentPolicy.parse({ templates: TEMPLATES, ...(root ? { runAs: { user: runtimeUserName } } : {}), ...input });

function template(name: keyof typeof TEMPLATES, extra: Partial<TemplateRuntime> = {}): TemplateRuntime {
  return {
    kind: 'template',
    template: name,
    executable: TEMPLATES[name].executable,
    executableSha256: digests[name]!,
    args: [],
    env: {},
    healthPath: '/health',
    ...extra,
  };
}

function assignment(assignmentId: string, runtime: Assignment['runtime'], extra: Partial<Assignment> = {}): Assignment {
  return {
    assignmentId,
    deploymentId: 'dep_policy',
    deploymentName: 'policy',
    model: 'policy-model',
    deploymentGeneration: 1,
    runtime,
    artifact: null,
    restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 20 },
    resources: { gpus: 0, memoryMiB: 1 },
    startup: { timeoutMs: 60_000, probeIntervalMs: 100, failureThreshold: 3 },
    templateHash: `template-${assignmentId}`,
    ...extra,
  };
}

async function waitFor<T>(check: () => T | Promise<T>, what: string, timeoutMs = 10_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let users: RuntimeUsers | null;
/** The one user of `users` (this file's policies name one). */
const oneUser = () => (users?.kind === 'one' ? users.user : null);
const adapterWith = (policy: AgentPolicy, opts: { users?: RuntimeUsers | null; gpus?: () => Promise<number[]> } = {}): RuntimeAdapter =>
  createAdapters({ stateDir, policy, users: opts.users === undefined ? users : opts.users, gpus: opts.gpus, log }).template;

/** Starts a runtime and waits for it to exit; resolves with its output. */
async function runToExit(adapter: RuntimeAdapter, a: Assignment): Promise<string[]> {
  const handle = await adapter.start(a);
  handles.push(handle);
  await waitFor(() => !adapter.alive(handle), `${a.assignmentId} to exit`);
  return await adapter.logs(a.assignmentId, 100);
}

beforeAll(async () => {
  for (const [name, spec] of Object.entries(TEMPLATES)) digests[name] = await digestOf(spec.executable);
  if (root) execFileSync('useradd', ['--system', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', runtimeUserName]);
  users = await runtimeUsers(policyOf(), root);
});
afterAll(async () => {
  if (!root) return;
  // userdel refuses while a process of the user exists: the last runtimes killed may not be reaped yet.
  await waitFor(() => {
    try {
      execFileSync('userdel', [runtimeUserName], { stdio: 'pipe' });
      return true;
    } catch (error) {
      if ((error as { status?: number }).status === 8) return false;
      throw error;
    }
  }, `userdel ${runtimeUserName}`);
});

beforeEach(async () => {
  stateDir = await mkdtemp(join(tmpdir(), 'lnx-isolation-'));
  await ensureStateDir(stateDir);
  const key = await generateMachineKey();
  await saveKey(stateDir, key.privateJwk);
  keyPath = join(stateDir, 'machine-key.jwk');
  keyText = await readFile(keyPath, 'utf8');
  logged.length = 0;
});
afterEach(async () => {
  for (const handle of handles.splice(0)) {
    try {
      process.kill(-handle.pid, 'SIGKILL');
    } catch {
      // Exited by itself.
    }
  }
  await rm(stateDir, { recursive: true, force: true });
});

describe.skipIf(!root)('runtimes cannot read the agent key (skipped unless root: only root can run runtimes as another user)', () => {
  it('runs a runtime as the policy user, without supplementary groups', async () => {
    const [line] = await runToExit(adapterWith(policyOf()), assignment('asg_id', template('id')));
    expect(line).toMatch(new RegExp(`^uid=\\d+\\(${runtimeUserName}\\) gid=\\d+\\(${runtimeUserName}\\) groups=\\d+\\(${runtimeUserName}\\)$`));
    expect(oneUser()!.ids!.uid).toBeGreaterThan(0);
  });

  it("denies a runtime that tries to read the agent's key, and the key never reaches its log", async () => {
    const lines = await runToExit(adapterWith(policyOf()), assignment('asg_cat', template('cat', { args: [keyPath] })));
    expect(lines.join('\n')).toMatch(/Permission denied/);
    const { d } = JSON.parse(keyText) as { d: string };
    for (const line of lines) expect(line).not.toContain(d);
    // The runtime's output still reached its log, through the descriptor the agent opened for it.
    expect(await readdir(join(stateDir, 'runtimes'))).toContain('asg_cat.log');
  });

  it('refuses every runtime when the agent is root and the policy names no runAs user', async () => {
    const noUser = AgentPolicy.parse({ templates: TEMPLATES });
    expect(await runtimeUsers(noUser, true)).toBeNull();
    await expect(adapterWith(noUser, { users: null }).start(assignment('asg_root', template('id')))).rejects.toThrow(
      'refused by local policy: the agent runs as root and the policy names no runAs user to run runtimes as',
    );
  });

  it('refuses a runAs user that does not exist, or is root', async () => {
    await expect(runtimeUsers(AgentPolicy.parse({ runAs: { user: `${runtimeUserName}x` } }), true)).rejects.toThrow(/runAs user .* does not exist/);
    await expect(runtimeUsers(AgentPolicy.parse({ runAs: { user: 'root' } }), true)).rejects.toThrow(/is root: runtimes must run unprivileged/);
    await expect(runtimeUsers(AgentPolicy.parse({ runAs: { user: runtimeUserName, group: 'root' } }), true)).rejects.toThrow(/is root/);
  });
});

describe('a runtime gets a minimal environment', () => {
  it("sees its assignment's allowed variables and the agent's own few, never a secret of the agent's environment", async () => {
    process.env.LNX_AGENT_SECRET = 'agent-secret-value';
    process.env.DATABASE_URL = 'postgres://lunanexa:hunter2@127.0.0.1/db';
    try {
      const lines = await runToExit(
        adapterWith(policyOf(), { gpus: async () => [0, 1] }),
        assignment('asg_env', template('env', { env: { ALLOWED_VAR: 'given' } }), { resources: { gpus: 1, memoryMiB: 1 } }),
      );
      const env = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));
      expect(Object.keys(env).sort()).toEqual([
        'ALLOWED_VAR',
        'CUDA_VISIBLE_DEVICES',
        'HOME',
        'LUNANEXA_RUNTIME_INSTANCE',
        'LUNANEXA_RUNTIME_TOKEN',
        'PATH',
        'PORT',
      ]);
      expect(env).toMatchObject({ ALLOWED_VAR: 'given', CUDA_VISIBLE_DEVICES: '0', PATH: '/usr/local/bin:/usr/bin:/bin', HOME: oneUser()!.home });
      expect(lines.join('\n')).not.toContain('agent-secret-value');
      expect(lines.join('\n')).not.toContain('hunter2');
    } finally {
      delete process.env.LNX_AGENT_SECRET;
      delete process.env.DATABASE_URL;
    }
  });

  it('gets the GPUs no other runtime holds, and none when all are held', async () => {
    const adapter = adapterWith(policyOf(), { gpus: async () => [0] });
    const first = await adapter.start(assignment('asg_gpu1', template('sleep', { args: ['30'] }), { resources: { gpus: 1, memoryMiB: 1 } }));
    handles.push(first);
    expect(first.gpuIndices).toEqual([0]);
    const second = assignment('asg_gpu2', template('sleep', { args: ['30'] }), { resources: { gpus: 1, memoryMiB: 1 } });
    await expect(adapter.start(second)).rejects.toThrow('needs 1 GPUs; 0 of 1 are free');
    await adapter.stop(first);
    const after = await adapter.start(second);
    handles.push(after);
    expect(after.gpuIndices).toEqual([0]);
  });
});

describe('an assignment outside the local policy is refused and reported, and nothing starts', () => {
  let supervisor: Supervisor | undefined;
  afterEach(async () => {
    await supervisor?.shutdown({ stopRuntimes: true, drain: false });
    supervisor = undefined;
  });

  /** Runs `a` under a supervisor with `policy`; resolves with its report once failed, after time for restarts to happen. */
  async function refused(policy: AgentPolicy, a: Assignment, opts: { users?: RuntimeUsers | null } = {}): Promise<RuntimeReport> {
    supervisor = new Supervisor({
      adapters: createAdapters({ stateDir, policy, users: opts.users === undefined ? users : opts.users, log }),
      onChange: () => {},
      load: () => IDLE,
      log,
      checkIntervalMs: 20,
    });
    supervisor.start();
    supervisor.apply(1, [a]);
    const report = () => supervisor!.reports().find((r) => r.assignmentId === a.assignmentId);
    await waitFor(() => report()?.state === 'failed', 'the runtime to fail');
    // Many times its restart backoff: a refusal is never restarted.
    await new Promise((r) => setTimeout(r, 300));
    expect(report()).toMatchObject({ state: 'failed', restarts: 0 });
    expect(supervisor.status()).toBe('degraded');
    // Nothing was launched: no process, so not even a log file.
    expect(await readdir(join(stateDir, 'runtimes'))).toEqual([]);
    return report()!;
  }

  it('refuses a template the policy does not name', async () => {
    const report = await refused(policyOf({ templates: { env: TEMPLATES.env } }), assignment('asg_x', template('cat', { args: [keyPath] })));
    expect(report.message).toBe('refused by local policy: template "cat" is not allowed');
  });

  it('refuses everything without a policy file, the simulated runtime included', async () => {
    const report = await refused(
      AgentPolicy.parse({}),
      assignment('asg_sim', { kind: 'simulated', model: 'm', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 }),
    );
    expect(report.message).toBe('refused by local policy: the built-in simulated runtime is not allowed');
  });

  it('refuses a template whose executable is not the one the policy names', async () => {
    const report = await refused(policyOf(), assignment('asg_x', template('cat', { executable: '/bin/sh', args: ['-c', 'cat /etc/shadow'] })));
    expect(report.message).toBe('refused by local policy: template "cat" must run /bin/cat, not /bin/sh');
  });

  it('reports a refusal quoting a long path within the heartbeat bound', async () => {
    const report = await refused(policyOf(), assignment('asg_x', template('cat', { executable: `/${'x'.repeat(4000)}` })));
    expect(report.message!.length).toBe(500);
    expect(report.message).toMatch(/^refused by local policy: template "cat" must run \/bin\/cat, not \/x+…$/);
  });

  it('refuses an executable whose digest on disk is not the pinned one', async () => {
    const report = await refused(policyOf(), assignment('asg_x', template('cat', { executableSha256: 'f'.repeat(64), args: [keyPath] })));
    expect(report.message).toBe(`refused by local policy: /bin/cat on disk has SHA-256 ${digests.cat}, not the pinned ${'f'.repeat(64)}`);
  });

  it("refuses a digest other than the policy's pin", async () => {
    const pinned = policyOf({ templates: { ...TEMPLATES, cat: { executable: '/bin/cat', sha256: 'e'.repeat(64) } } });
    const report = await refused(pinned, assignment('asg_x', template('cat', { args: [keyPath] })));
    expect(report.message).toBe(`refused by local policy: template "cat" pins executable digest ${digests.cat}, not the ${'e'.repeat(64)} of the local policy`);
  });

  it('refuses an environment variable the policy does not allow for the template', async () => {
    const report = await refused(policyOf(), assignment('asg_x', template('env', { env: { ALLOWED_VAR: 'x', LD_PRELOAD: '/tmp/evil.so' } })));
    expect(report.message).toBe('refused by local policy: template "env" may not set environment variable LD_PRELOAD');
  });

  it('refuses an artifact outside the artifact roots', async () => {
    const models = await mkdtemp(join(tmpdir(), 'lnx-models-'));
    try {
      await writeFile(join(models, 'ok.gguf'), 'w');
      const policy = policyOf({ artifactRoots: [models] });
      const shadow = await refused(policy, assignment('asg_x', template('cat'), { artifact: { uri: 'file:///etc/shadow', sha256: 'a'.repeat(64) } }));
      expect(shadow.message).toBe('refused by local policy: artifact file:///etc/shadow is not a file inside the allowed artifact roots');
    } finally {
      await rm(models, { recursive: true, force: true });
    }
  });

  it('fills {model_path} with the real path of an artifact inside a root', async () => {
    const models = await mkdtemp(join(tmpdir(), 'lnx-models-'));
    try {
      await writeFile(join(models, 'm.gguf'), 'weights', { mode: 0o644 });
      const artifact = { uri: pathToFileURL(join(models, 'm.gguf')).href, sha256: createHash('sha256').update('weights').digest('hex') };
      const adapter = adapterWith(policyOf({ artifactRoots: [models] }));
      const a = assignment('asg_model', template('env', { args: ['/bin/echo', '{model_path}', '{served_name}', '{gpu_indices}'] }), { artifact });
      await adapter.prepare(a, new AbortController().signal);
      expect(await runToExit(adapter, a)).toEqual([`${join(models, 'm.gguf')} policy-model `]);
      await expect(adapter.prepare({ ...a, artifact: { ...artifact, sha256: 'b'.repeat(64) } }, new AbortController().signal)).rejects.toThrow(
        'artifact digest does not match its pin',
      );
    } finally {
      await rm(models, { recursive: true, force: true });
    }
  });

  it('stops a runtime left running that the policy refuses now, rather than adopt it', async () => {
    const a = assignment('asg_adopt', template('sleep', { args: ['30'] }));
    const handle = await adapterWith(policyOf()).start(a);
    handles.push(handle);
    expect(pidAlive(handle.pid)).toBe(true);
    // The agent restarts with a policy that no longer names the template.
    const stricter = policyOf({ templates: { env: TEMPLATES.env } });
    await expect(adapterWith(stricter).inspect(a)).rejects.toThrow('refused by local policy: template "sleep" is not allowed');
    expect(pidAlive(handle.pid)).toBe(false);
    expect(logged.find((l) => l.event === 'stopping a runtime that cannot be adopted')?.fields).toMatchObject({ reason: 'the local policy refuses it' });
  });
});
