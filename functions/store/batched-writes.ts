import type { Db } from './db.js';
import { WriteBehind } from './write-behind.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { Logger } from '../kernel/telemetry/logger.js';
import type { Metrics } from '../kernel/telemetry/metrics.js';
import { errorFields } from '../kernel/telemetry/error-fields.js';

/** Batches sized so one statement stays well under PostgreSQL's 65535 bind parameters. */
const MAX_BATCH = 1_000;

/** What an instance's batched writes read of it; read lazily, since the instance's ports hold them. */
export interface BatchedWriteDeps {
  db: Db;
  config: ControlPlaneConfig;
  logger: Logger;
  /** Where dropped rows are counted; absent in tests that build a data plane alone. */
  metrics?: Metrics;
  /**
   * Where the batched records (each batch one statement) are written, when not on `db`: on Workers, Neon's HTTP
   * driver, one HTTPS request per statement instead of a connection of the request's own.
   */
  writes?: Db;
}

/** Makes the instance's records written behind the requests (`WriteBehind`), each batch one statement. */
export function batchedWrites(deps: () => BatchedWriteDeps) {
  return <T>(what: string, write: (db: Db, items: T[]) => Promise<void>) =>
    new WriteBehind<T>((items) => write(deps().writes ?? deps().db, items), {
      // Read on first use: the config is part of the ports these writes belong to.
      get delayMs() {
        return deps().config.writeBehindMs;
      },
      maxBatch: MAX_BATCH,
      // A bad row is isolated from its batch and dropped alone (WriteBehind): counted, and logged without values.
      onError: (error, items) => {
        deps().metrics?.writeBehindDropped.inc({ what }, items);
        deps().logger.error({ err: errorFields(error), items }, `writing ${what} failed: ${items} dropped`);
      },
    });
}
