import { CANCEL_REQUESTED } from '../../functions/services/workloads.js';
import pg from 'pg';
import { eq, sql } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { newId } from '../../shared/ids.js';
import { LISTENER_NAME } from '../../functions/store/pg-bus.js';
import { resync } from '../../functions/dataplane/resync.js';
import { machines, workloads } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { enrollTestMachine, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { SseReader } from '../helpers/sse.js';

const STREAM = '/agent/v1/stream';

/**
 * What an instance re-reads once its bus listens again (notifications sent while it did not listen are lost):
 * a real control plane on PostgreSQL, with machine streams held by it.
 */
describePg('resync after the bus listened again', () => {
  let plane: TestPlane;
  let seq = 0;
  const open: Array<{ reader: SseReader; abort(): void }> = [];
  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pg' });
  });
  afterEach(() => {
    for (const stream of open.splice(0)) stream.abort();
  });
  afterAll(async () => {
    await plane?.stop();
  });

  /** Opens the machine's stream and reads past `hello` and the first `desired`. */
  async function attach(prefix: string): Promise<{ machine: TestMachine; reader: SseReader }> {
    const machine = await enrollTestMachine(plane, `${prefix}-${++seq}`);
    const controller = new AbortController();
    const response = await fetch(`${plane.url}${STREAM}`, {
      headers: { authorization: `Bearer ${await machine.sign('GET', STREAM, '')}`, accept: 'text/event-stream' },
      signal: controller.signal,
    });
    expect(response.status).toBe(200);
    const reader = new SseReader(response.body!);
    open.push({ reader, abort: () => controller.abort() });
    expect((await reader.nextEvent(10_000))?.event).toBe('hello');
    expect((await reader.nextEvent(10_000))?.event).toBe('desired');
    return { machine, reader };
  }

  it('sends every stream held here its desired state again after the listening connection was killed', async () => {
    const { reader } = await attach('resent');
    const admin = new pg.Client({ connectionString: plane.databaseUrl });
    await admin.connect();
    try {
      const killed = await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = $1', [
        LISTENER_NAME,
      ]);
      expect(killed.rowCount).toBe(1);
    } finally {
      await admin.end();
    }
    // Nothing changed for this machine: only the resync after the reconnect sends it a state.
    expect((await reader.nextEvent(20_000))?.event).toBe('desired');
    expect((await plane.ports.metrics.busReconnects.get()).values[0]?.value).toBeGreaterThanOrEqual(1);
  });

  it('closes the streams of machines revoked meanwhile, and cancels the workloads here that were cancelled meanwhile', async () => {
    const kept = await attach('kept');
    const revoked = await attach('revoked');
    // What revokeMachine writes, without the notification that got lost.
    await plane.ports.store.db.update(machines).set({ revokedAt: sql`now()` }).where(eq(machines.id, revoked.machine.machineId));
    const workloadId = newId('workload');
    await plane.ports.store.db.insert(workloads).values({
      id: workloadId,
      workspaceId: plane.workspaceId,
      deploymentId: newId('deployment'),
      kind: 'chat',
      // What the cancel API records before its signal (which got lost): still running, cancel requested.
      state: 'running',
      errorCode: CANCEL_REQUESTED,
      instanceId: plane.ports.instanceId,
      deadline: new Date(Date.now() + 60_000),
    });
    // A request in flight on this instance, as the inference path registers it.
    const reasons: string[] = [];
    plane.ports.dataPlane.live.set(workloadId, { cancel: (reason) => reasons.push(reason) });
    try {
      const outcome = await resync(plane.ports);
      expect(outcome).toMatchObject({ revoked: 1, cancelled: 1 });
      expect(outcome.desired).toBeGreaterThanOrEqual(1);
      const event = await revoked.reader.nextEvent(10_000);
      expect(event?.event).toBe('revoked');
      expect(await revoked.reader.nextEvent(10_000)).toBeNull();
      expect((await kept.reader.nextEvent(10_000))?.event).toBe('desired');
      expect(reasons).toEqual(['cancelled by API']);
    } finally {
      plane.ports.dataPlane.live.delete(workloadId);
    }
  });
});
