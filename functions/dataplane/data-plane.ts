import { Admission } from './admission.js';
import { LinkHolder, type RemoteHolders } from '../link/holder.js';
import { StreamPings } from '../link/stream-pings.js';
import { RelayBudget } from '../link/relay-budget.js';
import { loadRoutes, RoutingTable } from './routing.js';
import { errorFields } from '../kernel/telemetry/error-fields.js';
import { batchedWrites, type BatchedWriteDeps } from '../store/batched-writes.js';
import type { WriteBehind } from '../store/write-behind.js';
import { writeWorkloads, type WorkloadRow } from '../services/workloads.js';
import { writePongs } from '../services/streams.js';

/** A running workload on this instance, so that the cancel API can reach it. */
interface LiveWorkload {
  cancel(reason: string): void;
}

/**
 * The data plane of one instance: the link holder, the routing snapshot, admission, the live workloads and their
 * records, and the liveness of the streams held here. The caches of authentication are the services' (`ServiceCaches`).
 */
export interface DataPlane {
  holder: LinkHolder;
  routing: RoutingTable;
  admission: Admission;
  live: Map<string, LiveWorkload>;
  /** The answer bytes this instance holds between nodes and clients, and their bounds. */
  budget: RelayBudget;
  /** When the agent of each stream held here last answered a ping. */
  pings: StreamPings;
  /** Workload records, written behind the requests (`config.writeBehindMs`). */
  workloads: WriteBehind<WorkloadRow>;
}

/** The data plane of the instance whose store, config and logger `deps()` gives (read lazily: the instance's ports hold it). */
export function createDataPlane(input: { deps: () => BatchedWriteDeps; remote?: RemoteHolders; requestScoped?: boolean }): DataPlane {
  const writeBehind = batchedWrites(input.deps);
  const deps = input.deps;
  return {
    holder: new LinkHolder(input.remote ?? null),
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
    budget: new RelayBudget(() => {
      const { relayBufferMaxBytes, plainAnswerMaxBytes, relayBuffersMaxBytes } = deps().config;
      return { streamed: relayBufferMaxBytes, plain: plainAnswerMaxBytes, instance: relayBuffersMaxBytes };
    }),
    live: new Map(),
    workloads: writeBehind('workload records', (db, rows) => writeWorkloads(db, rows)),
    pings: new StreamPings(writeBehind('ping answers', (db, rows) => writePongs(db, rows))),
  };
}
