import type { CryptoKey } from 'jose';
import { generateMachineKey } from '../../agent/state.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';
import { EnrollResponse } from '../../shared/contracts/enrollment.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import type { TestPlane } from './plane.js';

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

/** Mints an enrollment token for `name` and enrolls a fresh key pair through POST /agent/v1/enroll. */
export async function enrollTestMachine(plane: TestPlane, name: string, labels: Record<string, string> = {}): Promise<TestMachine> {
  const token = await createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name, labels, ttlSeconds: 300 } });
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

/** A well-formed heartbeat body for `machine`. */
export function heartbeatBody(machine: TestMachine, seq: number, extra: Record<string, unknown> = {}) {
  return { machineId: machine.machineId, bootId: 'boot-test-0001', seq, status: 'ready', gen: 0, runtimes: [], warmModels: [], metrics: {}, ...extra };
}
