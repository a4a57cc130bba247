import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MachineView } from '../../shared/contracts/machine.js';
import { enrollTestMachine, heartbeatBody, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * A control plane stopped for longer than a machine lifetime (issue 11, item 2): on its return, a machine whose
 * last report is from before the stop is `stale` (sight lost), neither `ready` (it was shown ready for a long-dead
 * fleet) nor `down` at once (a down wave before the first tick); it is `down` once a lifetime has passed without
 * a report, and `ready` as soon as it reports.
 */
function interruptionSuite(store: StoreKind) {
  let plane: TestPlane;
  let alive: TestMachine;
  let dead: TestMachine;

  const state = async (machine: TestMachine) => ((await (await plane.admin(`/api/v1/machines/${machine.machineId}`)).json()) as MachineView).state;

  beforeAll(async () => {
    // A lifetime of 3 s and a tick every 250 ms: a stop of 4 s is an interruption.
    plane = await startTestPlane({ store, config: { heartbeatIntervalMs: 500, runtimeGraceMs: 500, machineLifetimeMs: 3_000, runtimeTtlMs: 3_000 } });
    alive = await enrollTestMachine(plane, 'comes-back');
    dead = await enrollTestMachine(plane, 'never-again');
    for (const machine of [alive, dead]) expect((await machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, 1))).status).toBe(200);
    expect(await state(alive)).toBe('ready');
  });
  afterAll(async () => {
    await plane?.stop();
  });

  it('shows machines stale after the interruption, down a lifetime later, and ready once they report', async () => {
    // Stopped for longer than a lifetime plus a tick: an interruption.
    plane = await plane.restart({ downForMs: 4_000 });
    expect(await state(alive)).toBe('stale');
    expect(await state(dead)).toBe('stale');

    expect((await alive.request('POST', '/agent/v1/heartbeat', heartbeatBody(alive, 2))).status).toBe(200);
    expect(await state(alive)).toBe('ready');
    await waitFor(async () => (await state(dead)) === 'down', { timeoutMs: 15_000, what: 'the silent machine to be down a lifetime after the resumption' });
    expect((await alive.request('POST', '/agent/v1/heartbeat', heartbeatBody(alive, 3))).status).toBe(200);
    expect(await state(alive)).toBe('ready');
  });
}

describe('after a control-plane interruption (PGlite)', () => interruptionSuite('pglite'));
describePg('after a control-plane interruption (PostgreSQL)', () => interruptionSuite('pg'));
