import { Admission } from './admission.js';
import { TOKENS_CHANNEL, type Bus } from '../kernel/ports/bus.js';
import { InvocationHub, type RemoteLinks } from '../link/holder.js';
import { loadRoutes, RoutingTable } from './routing.js';
import type { Db } from '../store/db.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { Logger } from '../kernel/telemetry/logger.js';
import type { Metrics } from '../kernel/telemetry/metrics.js';
import { errorFields } from '../kernel/telemetry/error-fields.js';
import { WriteBehind } from '../store/write-behind.js';
import { machineJtis } from '../store/schema/index.js';
import { writeWorkloads, type WorkloadRow } from '../services/workloads.js';
import { MachineAuthCache, writeJtis } from '../services/machine-auth.js';
import { writePongs } from '../services/streams.js';
import { TokenCache } from '../services/token-cache.js';

/** A running workload on this instance, so that the cancel API can reach it. */
export interface LiveWorkload {
  cancel(reason: string): void;
}

/** The data plane of one instance: relay hub, routing snapshot, admission, live workloads. */
export interface Relay {
  hub: InvocationHub;
  routing: RoutingTable;
  admission: Admission;
  live: Map<string, LiveWorkload>;
  /** When the agent of each stream held here last answered a ping through this instance (`Date.now()`), by connection. */
  pingAnswers: Map<string, number>;
  /** Workload records, written behind the requests (`config.writeBehindMs`). */
  workloads: WriteBehind<WorkloadRow>;
  /** The frames-upload verifier's credential cache and in-memory replay fence. */
  authCache: MachineAuthCache;
  /** Replay-fence entries of frame uploads, fenced in memory first (see `MachineAuthCache`). */
  jtis: WriteBehind<typeof machineJtis.$inferInsert>;
  /** Pings answered over the uplinks of streams held here, recorded on their leases for the other instances. */
  pongs: WriteBehind<{ machineId: string; connectionId: string }>;
  /** `/v1`'s memory of authenticated API tokens; null where no bus reaches this instance to revoke them (Workers). */
  tokens: TokenCache | null;
}

/** Batches sized so one statement stays well under PostgreSQL's 65535 bind parameters. */
const MAX_BATCH = 1_000;

/** What the relay reads of its instance; read lazily, since the instance's ports hold the relay. */
export interface RelayDeps {
  db: Db;
  config: ControlPlaneConfig;
  logger: Logger;
  /** Where dropped rows are counted; absent in tests that build a relay alone. */
  metrics?: Metrics;
  /**
   * Where the batched records (each batch one statement) are written, when not on `db`: on Workers, Neon's HTTP
   * driver, one HTTPS request per statement instead of a connection of the request's own.
   */
  writes?: Db;
}

const writesOf = (deps: RelayDeps): Db => deps.writes ?? deps.db;

/** The relay of the instance whose store, config and logger `deps()` gives. */
export function createRelay(input: { bus: Bus; deps: () => RelayDeps; remote?: RemoteLinks; requestScoped?: boolean }): Relay {
  const deps = input.deps;
  // A request-scoped instance (a Workers isolate) hears no revocation: it asks the store for every request.
  const tokens = input.requestScoped ? null : new TokenCache();
  if (tokens) input.bus.subscribe(TOKENS_CHANNEL, () => tokens.clear());
  const writeBehind = <T>(what: string, write: (items: T[]) => Promise<void>) =>
    new WriteBehind<T>(write, {
      // Read on first use: the config is part of the ports the relay belongs to.
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
  return {
    hub: new InvocationHub(input.remote ?? null),
    routing: new RoutingTable(
      () => loadRoutes(deps().db, deps().config),
      () => deps().config.routingRefreshMs,
      (error) => {
        deps().metrics?.backgroundErrors.inc({ task: 'routing-refresh' });
        deps().logger.warn({ err: errorFields(error) }, 'routing refresh failed');
      },
      input.requestScoped,
    ),
    admission: new Admission(),
    live: new Map(),
    pingAnswers: new Map(),
    authCache: new MachineAuthCache(),
    workloads: writeBehind('workload records', (rows) => writeWorkloads(writesOf(deps()), rows)),
    jtis: writeBehind('replay-fence entries', (rows) => writeJtis(writesOf(deps()), rows)),
    pongs: writeBehind('ping answers', (rows) => writePongs(writesOf(deps()), rows)),
    tokens,
  };
}
