import type { Store } from './store/db.js';
import type { Bus } from './relay/bus.js';
import type { ControlPlaneConfig } from './config.js';
import type { Logger } from './telemetry/logger.js';
import type { Metrics } from './telemetry/metrics.js';
import type { Role } from '../shared/contracts/common.js';
import type { ControlPlaneIdentity } from './services/identity.js';
import type { Relay } from './relay/index.js';

/** Everything the app needs from the outside world; entry points build it, tests build it too. */
export interface Ports {
  store: Store;
  bus: Bus;
  config: ControlPlaneConfig;
  logger: Logger;
  metrics: Metrics;
  /** This control-plane instance, recorded on stream leases. */
  instanceId: string;
  /** Cluster id and signing key, loaded once. */
  identity: () => Promise<ControlPlaneIdentity>;
  /** The data plane: invocation relay, routing snapshot, admission. */
  relay: Relay;
}

/** An authenticated API token holder. */
export interface Actor {
  tokenId: string;
  workspaceId: string;
  role: Role;
}

/** An authenticated machine (agent request). */
export interface MachinePrincipal {
  machineId: string;
  workspaceId: string;
  credentialId: string;
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
