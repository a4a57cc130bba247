import { and, eq, sql } from 'drizzle-orm';
import { instances, streamLeases } from '../store/schema/index.js';
import type { Db } from '../store/db.js';

/**
 * This instance's own lease (docs/design.md section 4). A stream lease counts only while the instance holding it
 * is alive, so a crashed instance's machines become unroutable when this short lease lapses, and the workloads
 * it ran can be swept. Renewals are throttled to a third of the TTL: on Node a timer calls `touch`, on Workers
 * (no timers) the requests that need the lease do.
 */
export class InstanceLease {
  private renewedAt = 0;
  private renewing: Promise<void> | null = null;

  constructor(
    readonly instanceId: string,
    private readonly ttlMs: () => number,
    /** This instance's peer channel, advertised to the others with the lease (Node; none on Workers). */
    private readonly peerUrl: () => string | null = () => null,
  ) {}

  /** Renews the lease unless it was renewed within a third of its TTL. */
  touch(db: Db): Promise<void> {
    if (Date.now() - this.renewedAt < this.ttlMs() / 3) return Promise.resolve();
    this.renewing ??= this.renew(db).finally(() => (this.renewing = null));
    return this.renewing;
  }

  private async renew(db: Db): Promise<void> {
    const started = Date.now();
    const ttl = this.ttlMs() / 1000;
    await db
      .insert(instances)
      .values({ id: this.instanceId, peerUrl: this.peerUrl(), expiresAt: sql`now() + make_interval(secs => ${ttl})` })
      .onConflictDoUpdate({
        target: instances.id,
        set: { renewedAt: sql`now()`, peerUrl: this.peerUrl(), expiresAt: sql`now() + make_interval(secs => ${ttl})` },
      });
    this.renewedAt = started;
  }

  /** On an orderly stop: the instance and the streams it held are gone now, not when the leases lapse. */
  async retire(db: Db): Promise<void> {
    await db.delete(streamLeases).where(eq(streamLeases.instanceId, this.instanceId));
    await db.delete(instances).where(eq(instances.id, this.instanceId));
  }
}

/** The live instance holding a machine's stream, and where its peer channel is; null when none holds it. */
export async function linkHolderOf(db: Db, machineId: string): Promise<{ instanceId: string; peerUrl: string | null } | null> {
  const [row] = await db
    .select({ instanceId: instances.id, peerUrl: instances.peerUrl })
    .from(streamLeases)
    .innerJoin(instances, eq(instances.id, streamLeases.instanceId))
    .where(and(eq(streamLeases.machineId, machineId), sql`${streamLeases.expiresAt} > now()`, sql`${instances.expiresAt} > now()`));
  return row ?? null;
}

/** SQL: the instance `instanceId` (a column) holds an unexpired lease. */
export const instanceAlive = (instanceId: unknown) =>
  sql`exists (select 1 from ${instances} where ${instances.id} = ${instanceId} and ${instances.expiresAt} > now())`;

/** Forgets instances whose lease lapsed long ago (a day): they are kept a while to explain their leftovers. */
export async function sweepInstances(db: Db): Promise<void> {
  await db.delete(instances).where(sql`${instances.expiresAt} < now() - interval '1 day'`);
}
