import type { CryptoKey } from 'jose';
import { and, eq, isNull } from 'drizzle-orm';
import { assignments, machines } from '../../functions/store/schema/index.js';
import { generateMachineKey } from '../../agent/state.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';
import { EnrollResponse } from '../../shared/contracts/enrollment.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import type { GpuDevice, Inventory } from '../../shared/contracts/inventory.js';
import type { RuntimeReport } from '../../shared/contracts/heartbeat.js';
import type { TestPlane } from './plane.js';

/** One discrete GPU of a test inventory, as nvidia-smi would report it with its live readings unknown. */
export const testGpu = (index: number, memoryTotalMiB = 81_559): GpuDevice => ({
  index,
  uuid: null,
  name: 'H100',
  memoryTotalMiB,
  memoryUsedMiB: null,
  unifiedMemory: false,
  driverVersion: null,
  utilizationPercent: null,
  temperatureC: null,
  powerDrawW: null,
});

export const TEST_INVENTORY: Inventory = {
  hostname: 'test-host',
  os: 'linux',
  arch: 'arm64',
  cpus: 20,
  cpuModel: 'Cortex-X925',
  memoryTotalMiB: 131072,
  memoryAvailableMiB: 120000,
  diskFreeMiB: 1_000_000,
  gpus: [],
  agentVersion: 'test',
};

/** An enrolled machine driven directly over HTTP: the same signing code as the agent, with knobs to misbehave. */
export interface TestMachine {
  machineId: string;
  credentialId: string;
  clusterId: string;
  key: CryptoKey;
  sign(method: string, path: string, body: string, overrides?: { key?: CryptoKey; kid?: string; machineId?: string; lifetimeS?: number }): Promise<string>;
  request(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
}

/**
 * Mints an enrollment token for `name` and enrolls a fresh key pair through POST /agent/v1/enroll, into the plane's
 * workspace unless `workspaceId` names another.
 */
export async function enrollTestMachine(
  plane: TestPlane,
  name: string,
  labels: Record<string, string> = {},
  workspaceId = plane.workspaceId,
): Promise<TestMachine> {
  const token = await createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId, name, labels, ttlSeconds: 300 } });
  const key = await generateMachineKey();
  const response = await fetch(`${plane.url}/agent/v1/enroll`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token: token.token, name, publicKey: key.publicJwk, inventory: TEST_INVENTORY }),
  });
  if (response.status !== 201) throw new Error(`enroll failed: ${response.status} ${await response.text()}`);
  const enrolled = EnrollResponse.parse(await response.json());
  const machine: TestMachine = {
    machineId: enrolled.machineId,
    credentialId: enrolled.credentialId,
    clusterId: enrolled.clusterId,
    key: key.privateKey,
    sign: (method, path, body, o = {}) =>
      signMachineRequest({
        key: o.key ?? machine.key,
        kid: o.kid ?? machine.credentialId,
        machineId: o.machineId ?? machine.machineId,
        clusterId: machine.clusterId,
        method,
        path,
        body,
        lifetimeS: o.lifetimeS,
      }),
    async request(method, path, body, headers = {}) {
      const text = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
      return await fetch(`${plane.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${await machine.sign(method, path, text)}`, 'content-type': 'application/json', ...headers },
        body: text.length ? text : undefined,
      });
    },
  };
  return machine;
}

/** A well-formed runtime report: nothing running or queued, not warm, no start-up progress. */
export function runtimeReport(assignmentId: string, deploymentId: string, extra: Partial<RuntimeReport> = {}): RuntimeReport {
  return {
    assignmentId,
    deploymentId,
    state: 'ready',
    gen: 1,
    activeInvocations: 0,
    queueDepth: 0,
    warm: false,
    progress: null,
    restarts: 0,
    message: null,
    engine: null,
    ...extra,
  };
}

/** A well-formed heartbeat body for `machine`. */
export function heartbeatBody(machine: TestMachine, seq: number, extra: Record<string, unknown> = {}) {
  return { machineId: machine.machineId, bootId: 'boot-test-0001', seq, status: 'ready', gen: 0, runtimes: [], warmModels: [], metrics: {}, ...extra };
}

/**
 * A machine that keeps every replica placed on it `starting` (a model that never finishes loading): it
 * heartbeats every 150 ms over the real protocol, reporting each of its desired assignments as starting. For
 * tests of what the control plane does while replicas start, without a runtime. `stop()` ends the heartbeats.
 */
export async function startStartingMachine(
  plane: TestPlane,
  name: string,
  labels: Record<string, string>,
): Promise<{ machine: TestMachine; stop(): Promise<void> }> {
  const machine = await enrollTestMachine(plane, name, labels);
  let seq = 0;
  let stopped = false;
  const beat = async () => {
    const rows = await plane.systemCtx.db
      .select({ id: assignments.id, deploymentId: assignments.deploymentId })
      .from(assignments)
      .where(and(eq(assignments.machineId, machine.machineId), isNull(assignments.removedAt)));
    const [row] = await plane.systemCtx.db.select({ desiredGen: machines.desiredGen }).from(machines).where(eq(machines.id, machine.machineId));
    const gen = row?.desiredGen ?? 0;
    const runtimes = rows.map((r) => runtimeReport(r.id, r.deploymentId, { state: 'starting', gen, progress: { elapsedMs: 0, timeoutMs: 1_800_000 } }));
    const response = await machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, ++seq, { gen, runtimes }));
    if (response.status !== 200) throw new Error(`heartbeat refused: ${response.status} ${await response.text()}`);
  };
  await beat();
  const loop = (async () => {
    while (!stopped) {
      await new Promise((r) => setTimeout(r, 150));
      if (!stopped) await beat();
    }
  })();
  return {
    machine,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}
