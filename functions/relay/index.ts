import { Admission } from '../policy/admission.js';
import type { Bus } from './bus.js';
import { InvocationHub } from './hub.js';
import { loadRoutes, RoutingTable } from './routing.js';
import type { Ports } from '../context.js';
import { WriteBehind } from '../store/write-behind.js';
import { machineJtis } from '../store/schema/index.js';
import { writeWorkloads, type WorkloadRow } from '../services/workloads.js';
import { MachineAuthCache, writeJtis } from '../services/machine-auth.js';

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
  /** Workload records, written behind the requests (`config.writeBehindMs`). */
  workloads: WriteBehind<WorkloadRow>;
  /** The frames-upload verifier's credential cache and in-memory replay fence. */
  authCache: MachineAuthCache;
  /** Replay-fence entries of frame uploads, fenced in memory first (see `MachineAuthCache`). */
  jtis: WriteBehind<typeof machineJtis.$inferInsert>;
}

/** Batches sized so one statement stays well under PostgreSQL's 65535 bind parameters. */
const MAX_BATCH = 1_000;

/** The relay of the instance whose ports are `ports()` (read lazily: the ports hold the relay). */
export function createRelay(input: { bus: Bus; ports: () => Ports }): Relay {
  const ports = input.ports;
  const writeBehind = <T>(what: string, write: (items: T[]) => Promise<void>) =>
    new WriteBehind<T>(write, {
      // Read on first use: the config is part of the ports the relay belongs to.
      get delayMs() {
        return ports().config.writeBehindMs;
      },
      maxBatch: MAX_BATCH,
      onError: (error, items) => ports().logger.error({ err: error instanceof Error ? error.message : String(error), items }, `writing ${what} failed`),
    });
  return {
    hub: new InvocationHub(input.bus, () => ports().store.db),
    routing: new RoutingTable(
      () => loadRoutes(ports().store.db, ports().config),
      () => ports().config.routingRefreshMs,
      (error) => ports().logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'routing refresh failed'),
    ),
    admission: new Admission(),
    live: new Map(),
    authCache: new MachineAuthCache(),
    workloads: writeBehind('workload records', (rows) => writeWorkloads(ports().store.db, rows)),
    jtis: writeBehind('replay-fence entries', (rows) => writeJtis(ports().store.db, rows)),
  };
}
