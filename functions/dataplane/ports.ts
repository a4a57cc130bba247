import type { Store } from '../store/db.js';
import type { Bus } from '../kernel/ports/bus.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { Logger } from '../kernel/telemetry/logger.js';
import type { Metrics } from '../kernel/telemetry/metrics.js';
import type { Actor, MachinePrincipal } from '../core/principals.js';
import type { AfterWrite, ServiceCtx, ServicePorts } from '../services/service-context.js';
import type { ServiceCaches } from '../services/caches.js';
import type { ControlPlaneIdentity } from '../services/identity.js';
import type { DataPlane } from './data-plane.js';
import type { InstanceLease } from '../services/instances.js';
import type { ArtifactStore } from '../kernel/ports/artifact-store.js';
import type { ObjectStore } from '../kernel/ports/object-store.js';

/** Everything the app needs from the outside world; entry points build it, tests build it too. */
export interface Ports {
  store: Store;
  bus: Bus;
  config: ControlPlaneConfig;
  logger: Logger;
  metrics: Metrics;
  /** This control-plane instance, recorded on stream leases and workloads. */
  instanceId: string;
  /** Its own short lease: the stream leases and workloads of this instance count only while it is renewed. */
  instanceLease: InstanceLease;
  /** Cluster id and signing key, loaded once. */
  identity: () => Promise<ControlPlaneIdentity>;
  /** The data plane: the link holder, routing snapshot, admission, live workloads. */
  dataPlane: DataPlane;
  /** What the services keep in memory: the token cache, the frame uploads' credential cache and replay fence. */
  caches: ServiceCaches;
  /** Reconciles the fleet after a verb's write: wired by the host to the controller. */
  afterWrite: AfterWrite;
  /** Where model versions' files are verified; absent where there is none (Workers). */
  artifacts?: ArtifactStore;
  /** Where jobs' data (the Files API's files) is written, beside the model versions; absent where there is no store. */
  objects?: ObjectStore;
}

/** The context a service verb runs in, from this instance's ports: the verb's signature says which it reads. */
export function serviceCtx(ports: Ports, actor: string): ServiceCtx & ServicePorts {
  return {
    db: ports.store.db,
    actor,
    config: ports.config,
    bus: ports.bus,
    metrics: ports.metrics,
    identity: ports.identity,
    instanceId: ports.instanceId,
    afterWrite: ports.afterWrite,
  };
}

/** The typed Hono environment shared by every route. */
export interface AppEnv {
  Variables: {
    ports: Ports;
    requestId: string;
    actor: Actor;
    machine: MachinePrincipal;
    /** The exact body bytes, read once by machine authentication to check their digest. */
    rawBody: string;
  };
}
