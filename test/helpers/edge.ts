import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { unstable_getMiniflareWorkerOptions } from 'wrangler';
import { build } from '../../scripts/build.mjs';
import { ControlPlaneConfig } from '../../functions/kernel/config.js';
import { InstanceLease } from '../../functions/services/instances.js';
import { createDataPlane } from '../../functions/dataplane/data-plane.js';
import { createServiceCaches } from '../../functions/services/caches.js';
import { reconcileAfterWrites } from '../../functions/controller/driver.js';
import { createMemoryBus } from '../../functions/kernel/memory-bus.js';
import { createMetrics } from '../../functions/kernel/telemetry/metrics.js';
import { createIdentityLoader } from '../../functions/services/identity.js';
import { createApiToken, ensureWorkspace } from '../../functions/services/api-tokens.js';
import { openPgStore } from '../../functions/store/pg.js';
import { newId } from '../../shared/ids.js';
import { serviceCtx, type Ports } from '../../functions/dataplane/ports.js';
import type { Store } from '../../functions/store/db.js';
import { createTestDatabase } from './pg.js';
import { startNeonWsProxy, type NeonWsProxy } from './neon-ws-proxy.js';

/** wrangler.toml, read by wrangler's own config reader as `wrangler dev` reads it. */
const WRANGLER_TOML = join(fileURLToPath(new URL('../..', import.meta.url)), 'wrangler.toml');

/** The built Worker, a real PostgreSQL behind the Neon WebSocket proxy stand-in, and an admin token. */
export interface EdgeFixture {
  workerPath: string;
  outDir: string;
  database: { url: string; drop(): Promise<void> };
  /** The test's own view of the database (pg), for checks and seeding. */
  store: Store;
  ctx: ReturnType<typeof serviceCtx>;
  workspaceId: string;
  proxy: NeonWsProxy;
  adminToken: string;
  /** Bindings for the Worker (and its objects) on this database. */
  bindings(extra?: Record<string, string>): Record<string, string>;
  stop(): Promise<void>;
}

export async function startEdgeFixture(): Promise<EdgeFixture> {
  // A private output folder: the build suite may be writing dist/ at the same time.
  const outDir = await mkdtemp(join(tmpdir(), 'lnx-worker-'));
  const [outputs, database] = await Promise.all([build({ outDir, only: ['worker'] }), createTestDatabase()]);
  // The worker never migrates (npm run db:migrate does); the pg store migrates on open, like that command.
  const store = await openPgStore(database.url, { max: 2 });
  const bus = createMemoryBus();
  const instanceId = newId('instance');
  const writes = () => ({ db: store.db, config: ports.config, logger: ports.logger });
  const ports: Ports = {
    store,
    bus,
    config: ControlPlaneConfig.parse({}),
    logger: pino({ level: 'silent' }),
    metrics: createMetrics(),
    instanceId,
    instanceLease: new InstanceLease(instanceId, () => ports.config.instanceLeaseTtlMs),
    identity: createIdentityLoader(store.db),
    dataPlane: createDataPlane({ deps: writes }),
    caches: createServiceCaches({ bus, deps: writes }),
    afterWrite: reconcileAfterWrites(() => serviceCtx(ports, 'system')),
  };
  const ctx = serviceCtx(ports, 'system');
  const workspaceId = await ensureWorkspace({ ctx, input: { name: 'default' } });
  const adminToken = (await createApiToken({ ctx, input: { workspaceId, name: 'workers test admin', role: 'admin' } })).token;
  const proxy = await startNeonWsProxy();
  return {
    workerPath: outputs.worker!.path,
    outDir,
    database,
    store,
    ctx,
    workspaceId,
    proxy,
    adminToken,
    bindings: (extra = {}) => ({
      DATABASE_URL: database.url,
      NEON_WS_PROXY: proxy.address,
      NEON_SQL_ENDPOINT: proxy.sqlEndpoint,
      LUNANEXA_LOG_LEVEL: 'warn',
      ...extra,
    }),
    async stop() {
      // Each step runs even when an earlier one fails.
      const steps = [() => proxy.close(), () => store.close(), () => database.drop(), () => rm(outDir, { recursive: true, force: true })];
      const failures: unknown[] = [];
      for (const step of steps)
        await Promise.resolve()
          .then(step)
          .catch((error: unknown) => failures.push(error));
      if (failures.length > 0) throw failures[0];
    },
  };
}

/**
 * The Worker as wrangler.toml declares it (`env`: one of its environments): its compatibility date and flags, its
 * vars with the test's `bindings` over them, the machines' Durable Object binding. The module is the bundle built
 * for the test.
 */
export function workerOptions(fixture: Pick<EdgeFixture, 'workerPath' | 'outDir'>, name: string, bindings: Record<string, string>, env?: string) {
  const declared = unstable_getMiniflareWorkerOptions(WRANGLER_TOML, env).workerOptions;
  return {
    name,
    modules: true,
    scriptPath: fixture.workerPath,
    // Module names are relative to this root; the default (the cwd) would put the bundle behind a "..".
    modulesRoot: fixture.outDir,
    compatibilityDate: declared.compatibilityDate,
    compatibilityFlags: declared.compatibilityFlags,
    bindings: { ...(declared.bindings as Record<string, string>), ...bindings },
    durableObjects: declared.durableObjects,
  };
}
