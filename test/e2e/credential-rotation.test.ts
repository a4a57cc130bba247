import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { machineCredentials } from '../../functions/store/schema/index.js';
import { AgentIdentity } from '../../agent/state.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * A real agent rotates its key at two thirds of the credential lifetime, keeps working across the switch,
 * and the old credential stays valid (overlap) until its own expiry. The lifetime is shortened to seconds.
 */
describe('agent credential rotation', () => {
  const lifetimeMs = 6_000;
  let plane: TestPlane;
  let node: SimNode;
  const identity = async () => AgentIdentity.parse(JSON.parse(await readFile(join(node.stateDir, 'identity.json'), 'utf8')));

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: { credentialLifetimeMs: lifetimeMs } });
    node = await startSimNode(plane, 'rotating', join(plane.dataDir, 'nodes'));
  });
  afterAll(async () => {
    await stopSimNodes([node]);
    await plane.stop();
  });

  it('rotates at two thirds of the lifetime with overlap, and keeps reporting', async () => {
    // startSimNode returns once enrollment wrote the identity.
    const first = await identity();
    const enrolledAt = Date.parse(first.credentialIssuedAt);
    const rotated = await waitFor(
      async () => {
        const current = await identity();
        return current.credentialId !== first.credentialId ? current : null;
      },
      { timeoutMs: 20_000, what: 'rotation' },
    );
    // Not before two thirds of the lifetime the agent holds (the agent checks with every keep-alive). Its
    // issue time is its own clock at enrollment, a round trip after the control plane set the expiry.
    expect(Date.now() - enrolledAt).toBeGreaterThanOrEqual((2 * (Date.parse(first.credentialExpiresAt) - enrolledAt)) / 3);
    expect(rotated.machineId).toBe(first.machineId);

    const credentials = await plane.ports.store.db.select().from(machineCredentials).where(eq(machineCredentials.machineId, first.machineId));
    expect(credentials.map((c) => c.id).sort()).toEqual([first.credentialId, rotated.credentialId].sort());
    const log = await readFile(node.logFile, 'utf8');
    expect(log).toContain('credential rotated');

    // Heartbeats signed with the new key keep the machine ready after the old credential expired.
    const oldExpiry = Date.parse(first.credentialExpiresAt);
    await waitFor(async () => Date.now() > oldExpiry + 500, { timeoutMs: 20_000, what: 'old credential expiry' });
    const machine = await waitFor(
      async () => {
        const response = await plane.admin('/api/v1/machines');
        const found = ((await response.json()) as { data: MachineView[] }).data.find((m) => m.id === first.machineId);
        return found?.state === 'ready' && (found.heartbeatAgeMs ?? Infinity) < 1_000 ? found : null;
      },
      { what: 'fresh heartbeat after the old credential expired' },
    );
    expect(machine.streamAttached).toBe(true);
  });
});
