import { Admission } from '../policy/admission.js';
import type { Bus } from './bus.js';
import { InvocationHub } from './hub.js';
import { loadRoutes, RoutingTable } from './routing.js';
import type { Ports } from '../context.js';

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
}

/** The relay of the instance whose ports are `ports()` (read lazily: the ports hold the relay). */
export function createRelay(input: { bus: Bus; ports: () => Ports }): Relay {
  const ports = input.ports;
  return {
    hub: new InvocationHub(input.bus, () => ports().store.db),
    routing: new RoutingTable(
      () => loadRoutes({ db: ports().store.db, ports: ports(), actor: 'system' }),
      () => ports().config.routingRefreshMs,
      (error) => ports().logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'routing refresh failed'),
    ),
    admission: new Admission(),
    live: new Map(),
  };
}
