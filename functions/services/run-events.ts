import { inArray, sql } from 'drizzle-orm';
import { machines, runEvents } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { newId } from '../../shared/ids.js';
import type { StateEvent } from '../core/runs/states.js';

/** A state event of a run (`workerId` null) or of one of its workers, as stored. */
export interface NewRunEvent {
  runId: string;
  workerId: string | null;
  event: StateEvent;
}

/** Appends run events, in the order given (ids are time-ordered). */
export async function recordRunEvents(db: Db, events: readonly NewRunEvent[]): Promise<void> {
  if (events.length === 0) return;
  await db.insert(runEvents).values(
    events.map(({ runId, workerId, event }) => ({
      id: newId('event'),
      runId,
      workerId,
      from: event.from,
      to: event.to,
      reason: event.reason,
      origin: event.origin,
    })),
  );
}

/** A change of machines' run workers is a change of their desired state: its generation moves, as for assignments. */
export async function bumpDesiredGen(db: Db, machineIds: Iterable<string>): Promise<string[]> {
  const ids = [...new Set(machineIds)];
  if (ids.length > 0) {
    await db
      .update(machines)
      .set({ desiredGen: sql`${machines.desiredGen} + 1` })
      .where(inArray(machines.id, ids));
  }
  return ids;
}
