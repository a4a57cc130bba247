import { eq, sql } from 'drizzle-orm';
import { clusterSettings } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { ControllerState } from '../core/fleet/liveness.js';

/** The controller's tick record, which tells how long the control plane was away. */
export async function loadControllerState(db: Db): Promise<ControllerState> {
  const [row] = await db.select().from(clusterSettings).where(eq(clusterSettings.key, 'controller'));
  const value = (row?.value ?? {}) as { lastTickAt?: string; resumedAt?: string | null };
  return {
    lastTickAt: value.lastTickAt ? new Date(value.lastTickAt) : null,
    resumedAt: value.resumedAt ? new Date(value.resumedAt) : null,
  };
}

export async function saveControllerState(db: Db, state: ControllerState): Promise<void> {
  const value = { lastTickAt: state.lastTickAt?.toISOString() ?? null, resumedAt: state.resumedAt?.toISOString() ?? null };
  await db
    .insert(clusterSettings)
    .values({ key: 'controller', value })
    .onConflictDoUpdate({ target: clusterSettings.key, set: { value, updatedAt: sql`now()` } });
}
