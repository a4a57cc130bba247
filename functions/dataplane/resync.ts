import { and, eq, inArray, isNotNull, or } from 'drizzle-orm';
import { machines, workloads } from '../store/schema/index.js';
import { errorFields } from '../kernel/telemetry/error-fields.js';
import type { Ports } from './ports.js';
import { CANCEL_REQUESTED } from '../services/workloads.js';

/** Ids per statement, well under PostgreSQL's 65535 bind parameters. */
const CHUNK = 1_000;

const MACHINE = 'machine:';

export interface ResyncOutcome {
  /** Machine streams held here that were sent their desired state again. */
  desired: number;
  /** Machine streams held here whose machine was revoked meanwhile: closed. */
  revoked: number;
  /** Workloads running here that were cancelled meanwhile: cancelled now. */
  cancelled: number;
}

async function inChunks<T>(ids: string[], read: (chunk: string[]) => Promise<T[]>): Promise<T[]> {
  const rows: T[] = [];
  for (let i = 0; i < ids.length; i += CHUNK) rows.push(...(await read(ids.slice(i, i + CHUNK))));
  return rows;
}

/**
 * Re-reads what this instance may have missed while its bus was not listening (notifications sent meanwhile
 * are lost, not queued): the desired state of every machine stream it holds is sent again (a stream always
 * sends the full state, so an unchanged one costs a signature, never a wrong state), the streams of machines
 * revoked meanwhile are closed, the workloads it runs whose record says cancelled (or a cancel was requested) are cancelled, and the
 * routing snapshot is refreshed. Signals go to the local subscribers as if they had come over the bus. The API
 * tokens `/v1` remembers are all forgotten: a revocation signalled meanwhile never arrives.
 */
export async function resync(ports: Ports): Promise<ResyncOutcome> {
  const db = ports.store.db;
  ports.caches.tokens?.clear();
  try {
    const held = ports.bus
      .localChannels()
      .filter((channel) => channel.startsWith(MACHINE))
      .map((channel) => channel.slice(MACHINE.length));
    const revoked = new Set(
      (
        await inChunks(held, (chunk) =>
          db
            .select({ id: machines.id })
            .from(machines)
            .where(and(inArray(machines.id, chunk), isNotNull(machines.revokedAt))),
        )
      ).map((row) => row.id),
    );
    for (const machineId of held) {
      ports.bus.deliverLocal(
        `${MACHINE}${machineId}`,
        revoked.has(machineId) ? { type: 'revoked', reason: 'the machine has been revoked' } : { type: 'desired' },
      );
    }
    const cancelled = await inChunks([...ports.dataPlane.live.keys()], (chunk) =>
      db
        .select({ id: workloads.id })
        .from(workloads)
        .where(and(inArray(workloads.id, chunk), or(eq(workloads.state, 'cancelled'), eq(workloads.errorCode, CANCEL_REQUESTED)))),
    );
    for (const { id } of cancelled) ports.dataPlane.live.get(id)?.cancel('cancelled by API');
    return { desired: held.length - revoked.size, revoked: revoked.size, cancelled: cancelled.length };
  } finally {
    // Attachments and reports changed while nothing told this instance.
    ports.dataPlane.routing.invalidate();
  }
}

/**
 * What an instance does when its bus listens again after a loss: counts it and resyncs. A resync that fails
 * (the store is not back yet) is counted and logged; the next reconnect, keep-alives and heartbeats catch up.
 */
export function afterBusReconnect(ports: Ports): void {
  ports.metrics.busReconnects.inc();
  ports.logger.info('relay bus listening again; resyncing what it may have missed');
  void resync(ports).then(
    (outcome) => ports.logger.info(outcome, 'relay bus resync done'),
    (error: unknown) => {
      ports.metrics.backgroundErrors.inc({ task: 'bus-resync' });
      ports.logger.error({ err: errorFields(error) }, 'relay bus resync failed');
    },
  );
}
