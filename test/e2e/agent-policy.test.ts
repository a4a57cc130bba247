import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentPolicy } from '../../agent/policy.js';
import { DEFAULT_POLICY_PATH } from '../../agent/policy-file.js';
import { runtimeUsers } from '../../agent/runtime-user.js';
import { seedDemoDeployment, spawnAgent, waitForExit } from '../../functions/hosts/dev/fleet.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { machines, runtimeReports } from '../../functions/store/schema/index.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

const root = process.getuid?.() === 0;

/**
 * A real agent against a real control plane: the signed demo assignment runs only where the node's local policy
 * allows the simulated runtime, and then without the agent's environment (and as another user when it is root).
 */
describe('the node decides what it runs', () => {
  let plane: TestPlane | undefined;
  let agent: ChildProcess | undefined;

  afterEach(async () => {
    if (agent && agent.exitCode === null && agent.signalCode === null) {
      agent.kill('SIGTERM');
      await waitForExit(agent, 20_000).catch(() => agent!.kill('SIGKILL'));
    }
    agent = undefined;
    await plane?.stop();
    plane = undefined;
  });

  /** Enrolls `name` through the real path and runs it with `args` (after `run --state-dir …`). */
  async function startNode(name: string, args: string[], env: NodeJS.ProcessEnv = {}) {
    plane = await startTestPlane({ store: 'pglite' });
    await seedDemoDeployment(plane, 1);
    const stateDir = join(plane.dataDir, 'nodes', name);
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    const logFile = join(stateDir, 'agent.log');
    const token = await createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, name, labels: { sim: 'true' }, ttlSeconds: 300 },
    });
    const enroll = spawnAgent(['enroll', '--url', plane.url, '--token', '-', '--name', name, '--state-dir', stateDir], {
      logFile,
      env: { LUNANEXA_ENROLLMENT_TOKEN: token.token },
    });
    expect(await waitForExit(enroll, 60_000)).toBe(0);
    const { machineId } = JSON.parse(await readFile(join(stateDir, 'identity.json'), 'utf8')) as { machineId: string };
    agent = spawnAgent(['run', '--state-dir', stateDir, '--stop-runtimes-on-exit', ...args], { logFile, env: { LUNANEXA_AGENT_POLICY: undefined, ...env } });
    const p = plane;
    const runtimeRow = async () => (await p.ports.store.db.select().from(runtimeReports).where(eq(runtimeReports.machineId, machineId)))[0];
    return { stateDir, logFile, machineId, runtimeRow };
  }

  it.skipIf(existsSync(DEFAULT_POLICY_PATH))('without a policy file it runs nothing: the signed assignment is reported refused, and says so once', async () => {
    const node = await startNode('no-policy', []);
    const row = await waitFor(async () => ((await node.runtimeRow())?.state === 'failed' ? await node.runtimeRow() : null), { what: 'the refused runtime' });
    expect(row).toMatchObject({ state: 'failed', message: 'refused by local policy: the built-in simulated runtime is not allowed', restarts: 0 });
    const [machine] = await plane!.ports.store.db.select().from(machines).where(eq(machines.id, node.machineId));
    expect(machine!.reportedStatus).toBe('degraded');
    const log = await readFile(node.logFile, 'utf8');
    expect(log.match(/"event":"nothing will run on this node"/g)).toHaveLength(1);
    expect(log).toContain(`no local policy at ${DEFAULT_POLICY_PATH}`);
    // Nothing was launched: no runtime record, no log.
    expect(await readdir(join(node.stateDir, 'runtimes'))).toEqual([]);
  });

  it('refuses to start with a policy file named on purpose that does not exist', async () => {
    // The policy is read before anything is dialled: an identity on disk is all it takes to get there.
    const stateDir = await mkdtemp(join(tmpdir(), 'lnx-missing-policy-'));
    try {
      const identity = {
        url: 'http://127.0.0.1:9',
        name: 'n',
        machineId: 'm',
        workspaceId: 'w',
        clusterId: 'c',
        credentialId: 'k',
        credentialIssuedAt: '',
        credentialExpiresAt: '',
        jwks: { keys: [] },
        heartbeatIntervalMs: 20_000,
      };
      await writeFile(join(stateDir, 'identity.json'), JSON.stringify(identity), { mode: 0o600 });
      const logFile = join(stateDir, 'agent.log');
      agent = spawnAgent(['run', '--state-dir', stateDir, '--policy', '/nonexistent/agent.json'], { logFile });
      expect(await waitForExit(agent, 30_000)).toBe(1);
      expect(await readFile(logFile, 'utf8')).toContain('cannot read the local policy /nonexistent/agent.json');
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });

  it('with a policy allowing the simulated runtime, runs it without the agent environment, as the runAs user when root', async () => {
    const policyPath = join(tmpdir(), `lnx-policy-${process.pid}-${Date.now()}.json`);
    await writeFile(policyPath, JSON.stringify({ simulated: true, runAs: { user: 'nobody' } }), { mode: 0o644 });
    try {
      const node = await startNode('with-policy', [], {
        LUNANEXA_AGENT_POLICY: policyPath,
        LNX_E2E_AGENT_SECRET: 'e2e-agent-secret',
        DATABASE_URL: 'postgres://u:hunter2@127.0.0.1/x',
      });
      const row = await waitFor(async () => ((await node.runtimeRow())?.state === 'ready' ? await node.runtimeRow() : null), {
        what: 'the simulated runtime to be ready',
      });
      const { pid } = JSON.parse(await readFile(join(node.stateDir, 'runtimes', `${row!.assignmentId}.json`), 'utf8')) as { pid: number };
      const environ = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0').filter(Boolean);
      expect(environ.map((pair) => pair.slice(0, pair.indexOf('='))).sort()).toEqual([
        'HOME',
        'LUNANEXA_RUNTIME_INSTANCE',
        'LUNANEXA_RUNTIME_TOKEN',
        'PATH',
        'PORT',
      ]);
      expect(environ.join('\n')).not.toMatch(/e2e-agent-secret|hunter2/);
      const uid = /^Uid:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))![1];
      const nobody = await runtimeUsers(AgentPolicy.parse({ runAs: { user: 'nobody' } }), true);
      expect(Number(uid)).toBe(root && nobody?.kind === 'one' ? nobody.user.ids!.uid : process.getuid!());
      // It serves: inference reaches it through the dial-out link.
      const response = await fetch(`${plane!.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane!.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });
      expect(response.status).toBe(200);
      const log = await readFile(node.logFile, 'utf8');
      expect(log).toContain('"event":"local policy"');
      expect(log).not.toContain('nothing will run on this node');
    } finally {
      await rm(policyPath, { force: true });
    }
  });
});
