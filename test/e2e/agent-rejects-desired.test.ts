import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, eq, isNull } from 'drizzle-orm';
import { exportJWK, generateKeyPair } from 'jose';
import { seedDemoDeployment, spawnAgent, waitForExit } from '../../functions/hosts/dev/fleet.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { assignments, machines, runtimeReports } from '../../functions/store/schema/index.js';
import type { MachineList } from '../../shared/contracts/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/** Processes whose parent is `pid` and whose command line mentions `needle` (Linux /proc). */
async function childrenMatching(pid: number, needle: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8');
      // Field 4 (ppid) follows the parenthesised command name, which may itself contain spaces.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).split('\0').join(' ');
      if (ppid === pid && cmdline.includes(needle)) found.push(Number(entry));
    } catch {
      // The process went away while we looked.
    }
  }
  return found;
}

describe('agent refuses an unverifiable desired state', () => {
  const name = 'rogue-keys';
  let plane: TestPlane;
  let root: string;
  let stateDir: string;
  let logFile: string;
  let agent: ChildProcess | undefined;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    root = await mkdtemp(join(tmpdir(), 'lnx-e2e-'));
    stateDir = join(root, name);
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    logFile = join(stateDir, 'agent.log');
  });
  afterAll(async () => {
    if (agent && agent.exitCode === null && agent.signalCode === null) {
      // SIGTERM first: with --stop-runtimes-on-exit the agent takes down any runtime it (wrongly) started.
      agent.kill('SIGTERM');
      await waitForExit(agent, 10_000).catch(async () => {
        agent!.kill('SIGKILL');
        await waitForExit(agent!).catch(() => {});
      });
    }
    await plane.stop();
    await rm(root, { recursive: true, force: true });
  });

  it('keeps heartbeating, counts the rejection and never starts the runtime', async () => {
    const deployment = await seedDemoDeployment(plane, 1);
    const token = await createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, name, labels: { sim: 'true' }, ttlSeconds: 300 },
    });
    const enroll = spawnAgent(['enroll', '--url', plane.url, '--token', '-', '--name', name, '--state-dir', stateDir], {
      logFile,
      env: { LUNANEXA_ENROLLMENT_TOKEN: token.token },
    });
    expect(await waitForExit(enroll, 30_000)).toBe(0);

    // Same kid, different key: a control plane impostor (or a corrupted pin) must not be obeyed.
    const identityPath = join(stateDir, 'identity.json');
    const identity = JSON.parse(await readFile(identityPath, 'utf8')) as { machineId: string; jwks: { keys: Array<{ kid: string; x: string }> } };
    expect(identity.jwks.keys.length).toBeGreaterThan(0);
    const impostor = await exportJWK((await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true })).publicKey);
    identity.jwks.keys = identity.jwks.keys.map((key) => ({ ...key, x: impostor.x! }));
    await writeFile(identityPath, JSON.stringify(identity, null, 2), { mode: 0o600 });
    const machineId = identity.machineId;

    agent = spawnAgent(['run', '--state-dir', stateDir, '--stop-runtimes-on-exit'], { logFile });

    // Heartbeats flow and the stream attaches: the agent is alive and connected, only the state is refused.
    await waitFor(
      async () => {
        const list = (await (await plane.admin('/api/v1/machines')).json()) as MachineList;
        const view = list.data.find((m) => m.id === machineId);
        return view?.state === 'ready' && view.streamAttached;
      },
      { timeoutMs: 15_000, what: 'the machine to be ready with its stream attached' },
    );
    // The controller placed the demo replica here, so the refused state did carry a runtime to start.
    const [assignment] = await waitFor(
      async () => {
        const rows = await plane.ports.store.db
          .select()
          .from(assignments)
          .where(and(eq(assignments.machineId, machineId), eq(assignments.deploymentId, deployment.id), isNull(assignments.removedAt)));
        return rows.length > 0 ? rows : null;
      },
      { timeoutMs: 5_000, what: 'the demo assignment' },
    );
    expect(assignment).toBeDefined();

    const row = await waitFor(
      async () => {
        const [m] = await plane.ports.store.db.select().from(machines).where(eq(machines.id, machineId));
        return m && m.desiredGen >= 1 && (m.metrics.desired_rejected_total ?? 0) >= 1 ? m : null;
      },
      { timeoutMs: 5_000, what: 'a heartbeat reporting desired_rejected_total >= 1' },
    );
    expect(row.metrics.desired_rejected_total).toBeGreaterThanOrEqual(1);
    await waitFor(async () => (await readFile(logFile, 'utf8')).includes('desired state rejected'), {
      timeoutMs: 5_000,
      what: 'the rejection in the agent log',
    });

    // Give a (wrongly) obeying agent time to launch the simulator (its load time is 300 ms).
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const [after] = await plane.ports.store.db.select().from(machines).where(eq(machines.id, machineId));
    // The agent still holds generation 0: it never adopted the signed assignment.
    expect(after!.reportedGen).toBe(0);
    expect(after!.desiredGen).toBeGreaterThanOrEqual(1);
    expect(after!.lastHeartbeatAt!.getTime()).toBeGreaterThan(row.lastHeartbeatAt!.getTime());
    expect(await plane.ports.store.db.select().from(runtimeReports).where(eq(runtimeReports.machineId, machineId))).toEqual([]);
    expect(await readdir(join(stateDir, 'runtimes'))).toEqual([]);
    await expect(readFile(join(stateDir, 'desired-gen.json'), 'utf8')).rejects.toThrow();
    expect(await childrenMatching(agent.pid!, 'sim-runtime')).toEqual([]);
    const log = await readFile(logFile, 'utf8');
    expect(log).toContain('desired state rejected');
    expect(log).not.toContain('"event":"fatal"');

    agent.kill('SIGTERM');
    expect(await waitForExit(agent, 10_000)).toBe(0);
    expect(await readFile(logFile, 'utf8')).toContain('agent stopped');
  });
});
