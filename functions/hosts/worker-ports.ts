import pino from 'pino';
import { NodeEnv, configFromEnv } from './node-env.js';
import { createDataPlane } from '../dataplane/data-plane.js';
import type { Bus } from '../kernel/ports/bus.js';
import type { RemoteHolders } from '../link/holder.js';
import { LOG_SERIALIZERS, REDACT_PATHS, type Logger } from '../kernel/telemetry/logger.js';
import { createMetrics } from '../kernel/telemetry/metrics.js';
import { createIdentityLoader, type ControlPlaneIdentity } from '../services/identity.js';
import { InstanceLease } from '../services/instances.js';
import { newId } from '../../shared/ids.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { Store } from '../store/db.js';
import { serviceCtx, type Ports } from '../dataplane/ports.js';
import { reconcileAfterWrites } from '../controller/driver.js';
import { createServiceCaches } from '../services/caches.js';
import type { WorkerEnv } from './worker-env.js';

function edgeLogger(level: string): Logger {
  // pino's browser build (the one the Workers bundle gets) honours `redact`; `write` makes it emit one JSON line
  // per entry, which is what Workers Logs and `wrangler tail` index.
  return pino({
    level,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    // `err` without query parameters, as on Node; the browser build applies serializers only when told to.
    serializers: LOG_SERIALIZERS,
    browser: { asObject: true, serialize: true, write: (entry: object) => console.log(JSON.stringify(entry)) },
  }).child({ name: 'lunanexa' }) as Logger;
}

/** The Node config with the Worker's timing overrides; the Node-only fields keep their defaults. */
export function edgeConfig(env: WorkerEnv, overrides: Partial<ControlPlaneConfig> = {}): ControlPlaneConfig {
  // The cron trigger ticks once a minute: the controller must know its period to tell a tick gap from an outage.
  return { ...configFromEnv({ ...NodeEnv.parse({}), LUNANEXA_RECONCILE_INTERVAL_MS: 60_000, ...env }), ...overrides };
}

/**
 * The ports of a Worker isolate or of a machine's Durable Object: one shape for both, so that the same app and
 * services run in either. What differs is handed in: the store (per request in the isolate, the object's own in
 * the object), the bus, where machine links live, and the config.
 */
export function edgePorts(input: { env: WorkerEnv; config: ControlPlaneConfig; store: Store; bus: Bus; remote: RemoteHolders | null }): Ports {
  const { store, bus, config } = input;
  const instanceId = newId('instance');
  let identity: ControlPlaneIdentity | undefined;
  const writes = () => ({ db: store.db, writes: store.statements, config: ports.config, logger: ports.logger, metrics: ports.metrics });
  const ports: Ports = {
    store,
    bus,
    config,
    logger: edgeLogger(input.env.LUNANEXA_LOG_LEVEL),
    // Per isolate or per object: an isolate's process.* numbers describe the runtime, not this deployment, and
    // its counters only what this isolate served (docs/workers.md).
    metrics: createMetrics(),
    instanceId,
    instanceLease: new InstanceLease(instanceId, () => ports.config.instanceLeaseTtlMs),
    // Only the resolved value is kept: a pending load belongs to the request whose connection runs it.
    identity: async () => (identity ??= await createIdentityLoader(store.db)()),
    dataPlane: createDataPlane({ remote: input.remote ?? undefined, requestScoped: true, deps: writes }),
    caches: createServiceCaches({ bus, requestScoped: true, deps: writes }),
    afterWrite: reconcileAfterWrites(() => serviceCtx(ports, 'system')),
  };
  return ports;
}
