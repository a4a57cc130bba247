import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { serve, type ServerType } from '@hono/node-server';
import { ControlPlaneConfig } from '../kernel/config.js';
import { NodeEnv, configFromEnv } from './node-env.js';
import { newApp } from '../api/app.js';
import { createMemoryBus } from '../kernel/memory-bus.js';
import { createPgBus } from '../store/pg-bus.js';
import { afterBusReconnect } from '../dataplane/resync.js';
import { createDataPlane } from '../dataplane/data-plane.js';
import { createLogger, type Logger } from '../kernel/telemetry/logger.js';
import { createMetrics } from '../kernel/telemetry/metrics.js';
import { createIdentityLoader } from '../services/identity.js';
import { createApiToken, ensureWorkspace, mintFirstAdminToken } from '../services/api-tokens.js';
import { ROOT_WORKSPACE } from '../services/workspaces.js';
import { controllerTick, reconcileAfterWrites } from '../controller/driver.js';
import { startJobHost } from './jobs/host.js';
import { localBackend } from './jobs/local.js';
import { agentBackend } from './jobs/agent.js';
import { slurmBackend } from './jobs/slurm.js';
import { createServiceCaches } from '../services/caches.js';
import { openPgStore } from '../store/pg.js';
import { auditOwnedByPlane } from '../store/roles.js';
import { loadSecretKeyFile } from '../services/secret-key.js';
import { localArtifactStore } from '../store/artifacts/local.js';
import { localObjectStore } from '../store/artifacts/local-objects.js';
import { artifactUrlKey } from '../services/store-secrets.js';
import { newId } from '../../shared/ids.js';
import { InstanceLease } from '../services/instances.js';
import { PeerAuth } from '../link/peer-auth.js';
import { PeerHolders } from '../link/peer-holders.js';
import { startPeerServer, type PeerServer, type PeerTls } from '../api/peer/server.js';
import { capConnections, headerBounds } from '../api/http/listener-bounds.js';
import { errorFields } from '../kernel/telemetry/error-fields.js';
import { serviceCtx, type Ports } from '../dataplane/ports.js';
import type { ServiceCtx, ServicePorts } from '../services/service-context.js';

export interface ControlPlaneOptions {
  port?: number;
  host?: string;
  dataDir: string;
  databaseUrl?: string;
  /**
   * The role that applies the migrations and so owns the tables (LUNANEXA_DATABASE_OWNER_URL), when it is not
   * `databaseUrl`'s: that one is then granted only what the plane does, the audit log append-only.
   */
  databaseOwnerUrl?: string;
  /**
   * The peer channel's listener (loopback, a free port by default), the URL advertised to the other instances, its
   * certificate and key when it serves HTTPS, and the certificates (PEM) the other instances' are checked against.
   */
  peer?: { host?: string; port?: number; url?: string; tls?: PeerTls; ca?: string };
  config?: Partial<ControlPlaneConfig>;
  logger?: Logger;
}

export interface RunningControlPlane {
  url: string;
  port: number;
  ports: Ports;
  workspaceId: string;
  /** Where the other instances reach this one's peer channel; null on the embedded store, which has none. */
  peerUrl: string | null;
  /** Path of the admin token file (mode 0600). */
  adminTokenPath: string;
  /** Null on a shared store whose admin token another instance (or db:bootstrap) minted: this data dir has none. */
  adminToken: string | null;
  /** A service context for seeding and tests. */
  systemCtx: ServiceCtx & ServicePorts;
  close(): Promise<void>;
}

/**
 * The admin token is written once, on first start, to `<data dir>/admin.token` (mode 0600). Only its hash
 * is in the store. On the embedded store the data dir is the store: if the file is lost a new admin token is
 * minted on the next start. On a shared store (DATABASE_URL) only the store's first start mints one: an instance
 * started with a fresh data dir while the store has an active admin token mints none (null) and logs how to get
 * one (`npm run db:bootstrap`), so that instances do not each add a non-expiring admin credential.
 */
async function bootstrapAdminToken(ctx: ServiceCtx, input: { workspaceId: string; path: string; shared: boolean; logger: Logger }): Promise<string | null> {
  try {
    return (await readFile(input.path, 'utf8')).trim();
  } catch {
    // Not swallowed: a missing file (first start, or lost) is why a token is minted; any other failure to read it fails the writeFile below.
    const name = 'bootstrap admin';
    const token = input.shared
      ? await mintFirstAdminToken({ ctx, input: { workspaceId: input.workspaceId, name } })
      : (await createApiToken({ ctx, input: { workspaceId: input.workspaceId, name, role: 'admin' } })).token;
    if (token === null) {
      input.logger.warn(
        { adminTokenPath: input.path },
        "no admin token written: the store already has an active admin API token (another instance's, or db:bootstrap's). " +
          'Use that one; if it is lost, mint another with `DATABASE_URL=... npm run db:bootstrap -- --force`',
      );
      return null;
    }
    await writeFile(input.path, `${token}\n`, { mode: 0o600 });
    return token;
  }
}

/** Starts the control plane on Node: store (PGlite or `pg`), migrations, bootstrap, HTTP server, controller tick. */
export async function startControlPlane(opts: ControlPlaneOptions): Promise<RunningControlPlane> {
  const dataDir = resolve(opts.dataDir);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  // An existing dir keeps the mode it was made with: the data dir holds the store and the admin token, owner only.
  await chmod(dataDir, 0o700);
  const logger = opts.logger ?? createLogger();
  const artifactsDir = resolve(opts.config?.artifactsDir ?? join(dataDir, 'artifacts'));
  // Runtime secrets are sealed under LUNANEXA_SECRET_KEY (in `config`) or else the data dir's own key file.
  const config = ControlPlaneConfig.parse({ ...opts.config, secretKey: opts.config?.secretKey ?? (await loadSecretKeyFile(dataDir)), artifactsDir });
  // Operators copy versions' files in: it is theirs to lay out (docs/artifacts.md); it only has to exist.
  if (!config.artifactsS3) await mkdir(artifactsDir, { recursive: true });
  if (opts.databaseOwnerUrl && !opts.databaseUrl) throw new Error('LUNANEXA_DATABASE_OWNER_URL is set without DATABASE_URL: the embedded store has one role');
  // The embedded store is imported only when it is used: on DATABASE_URL the bundle runs without PGlite installed.
  const store = opts.databaseUrl
    ? await openPgStore(opts.databaseUrl, { ownerUrl: opts.databaseOwnerUrl })
    : await (await import('../store/pglite.js')).openPgliteStore(join(dataDir, 'store'));
  // Said once, where it can be mended: the embedded store has only the one role.
  if (opts.databaseUrl && (await auditOwnedByPlane(store.db))) {
    logger.warn(
      "the audit log can be tampered with by this control plane's own database role: it owns audit_events (or acts as its owner), so anyone " +
        'with DATABASE_URL can switch its append-only trigger off and cut or rewrite entries, and the chain would still verify. Apply the ' +
        'migrations as a separate owner role: set LUNANEXA_DATABASE_OWNER_URL (docs/operations.md, "Database roles")',
    );
  }
  // Across instances the bus is Postgres LISTEN/NOTIFY; the embedded store is one process, so memory suffices.
  const bus = opts.databaseUrl
    ? await createPgBus(opts.databaseUrl, {
        onError: (error) => logger.warn({ err: errorFields(error) }, 'relay bus error'),
        // Only ever called after a loss and a reconnect, long after `ports` below exists.
        onReconnect: () => afterBusReconnect(ports),
      })
    : createMemoryBus();
  const instanceId = newId('instance');
  const identity = createIdentityLoader(store.db);
  const peerAuth = new PeerAuth(instanceId, identity);
  // The peer channel matters only where several instances share a store; the embedded store has one.
  const peerHolders = opts.databaseUrl ? new PeerHolders({ instanceId, auth: peerAuth, db: () => ports.store.db, ca: opts.peer?.ca }) : undefined;
  let peerServer: PeerServer | null = null;
  // Known once the server listens; the local store's URLs are made only after that.
  let listening = '';
  const writes = () => ({ db: ports.store.db, config: ports.config, logger: ports.logger, metrics: ports.metrics });
  const ports: Ports = {
    store,
    bus,
    config,
    logger,
    metrics: createMetrics({ processMetrics: true }),
    instanceId,
    instanceLease: new InstanceLease(
      instanceId,
      () => ports.config.instanceLeaseTtlMs,
      () => peerServer?.url ?? null,
    ),
    identity,
    dataPlane: createDataPlane({ remote: peerHolders, deps: writes }),
    caches: createServiceCaches({ bus, deps: writes }),
    afterWrite: reconcileAfterWrites(() => serviceCtx(ports, 'system')),
    // The AWS SDK is loaded only where a bucket is configured: most planes never need it.
    artifacts: config.artifactsS3
      ? (await import('../store/artifacts/s3.js')).s3ArtifactStore(config.artifactsS3)
      : localArtifactStore(artifactsDir, { baseUrl: () => config.publicUrl ?? listening, key: () => artifactUrlKey(ports) }),
    objects: config.artifactsS3 ? (await import('../store/artifacts/s3-objects.js')).s3ObjectStore(config.artifactsS3) : localObjectStore(artifactsDir),
  };
  peerServer = peerHolders
    ? await startPeerServer(ports, peerAuth, {
        host: opts.peer?.host ?? '127.0.0.1',
        port: opts.peer?.port ?? 0,
        advertise: opts.peer?.url,
        tls: opts.peer?.tls,
      })
    : null;
  const systemCtx = serviceCtx(ports, 'system');
  const workspaceId = await ensureWorkspace({ ctx: systemCtx, input: { name: ROOT_WORKSPACE } });
  const adminTokenPath = join(dataDir, 'admin.token');
  const adminToken = await bootstrapAdminToken(systemCtx, { workspaceId, path: adminTokenPath, shared: Boolean(opts.databaseUrl), logger });
  await ports.identity();
  await ports.instanceLease.touch(store.db);
  // Renewed well within its TTL; a failed renewal (store away) is retried on the next beat, never fatal.
  const leaseTimer = setInterval(() => {
    void ports.instanceLease.touch(store.db).catch((error: unknown) => {
      ports.metrics.backgroundErrors.inc({ task: 'instance-lease' });
      logger.warn({ err: errorFields(error) }, 'instance lease renewal failed');
    });
  }, config.instanceLeaseTtlMs / 6);
  await ports.dataPlane.routing.start();

  const app = newApp(ports);
  const server: ServerType = await new Promise((resolveServer) => {
    const s = serve(
      {
        fetch: app.fetch,
        port: opts.port ?? 8787,
        hostname: opts.host ?? '127.0.0.1',
        serverOptions: headerBounds(config),
      },
      () => resolveServer(s),
    );
  });
  // Idle keep-alive connections outlive the usual 60 s idle timeout of the load balancers and clients in
  // front: the side that closes first must be the client, or a request sent on a connection the server is
  // closing at that instant fails ("other side closed"). Node's default is 5 s. Requests (bodies) keep Node's own bound.
  if ('keepAliveTimeout' in server) server.keepAliveTimeout = 65_000;
  capConnections(server, config);
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : (opts.port ?? 8787);
  listening = `http://${opts.host ?? '127.0.0.1'}:${port}`;

  let ticking: Promise<void> | null = null;
  const tick = () => {
    ticking ??= controllerTick({ ctx: systemCtx })
      .catch((error: unknown) => logger.error({ err: error instanceof Error ? error.message : String(error) }, 'controller tick failed'))
      .finally(() => (ticking = null));
    return ticking;
  };
  await tick();
  const interval = setInterval(tick, config.reconcileIntervalMs);
  const slurm = slurmBackend(config.jobsSlurm);
  const backends = [localBackend({ capacity: config.jobsLocalRunners, logger }), agentBackend(systemCtx, config.jobsAgent), ...(slurm ? [slurm] : [])];
  const jobHost = startJobHost(ports, { planeUrl: () => listening, backends });

  return {
    url: listening,
    port,
    ports,
    workspaceId,
    peerUrl: peerServer?.url ?? null,
    adminTokenPath,
    adminToken,
    systemCtx,
    async close() {
      clearInterval(interval);
      await jobHost.stop();
      clearInterval(leaseTimer);
      ports.dataPlane.routing.stop();
      await ticking;
      await ports.bus.close();
      await peerServer?.close();
      await peerHolders?.close();
      await new Promise<void>((done) => {
        server.close(() => done());
        // SSE streams never end on their own; cut them so close() returns.
        if ('closeAllConnections' in server) server.closeAllConnections();
      });
      // Requests the cut connections ended have recorded how they ended; write that before the store goes.
      await ports.dataPlane.workloads.flush();
      await ports.caches.machineAuth.flush();
      await ports.instanceLease.retire(store.db).catch((error: unknown) => logger.warn({ err: errorFields(error) }, 'instance lease retirement failed'));
      await store.close();
    },
  };
}

/** The peer channel's options from LUNANEXA_PEER_*, its TLS files read. */
export async function peerFromEnv(env: NodeEnv): Promise<NonNullable<ControlPlaneOptions['peer']>> {
  const { LUNANEXA_PEER_TLS_CERT: cert, LUNANEXA_PEER_TLS_KEY: key, LUNANEXA_PEER_TLS_CA: ca } = env;
  if (Boolean(cert) !== Boolean(key)) throw new Error('LUNANEXA_PEER_TLS_CERT and LUNANEXA_PEER_TLS_KEY go together: set both or neither');
  return {
    host: env.LUNANEXA_PEER_HOST,
    port: env.LUNANEXA_PEER_PORT,
    url: env.LUNANEXA_PEER_URL,
    tls: cert && key ? { cert: await readFile(cert, 'utf8'), key: await readFile(key, 'utf8') } : undefined,
    ca: ca ? await readFile(ca, 'utf8') : undefined,
  };
}

async function main() {
  const env = NodeEnv.parse(process.env);
  const plane = await startControlPlane({
    port: env.LUNANEXA_PORT,
    host: env.LUNANEXA_HOST,
    dataDir: env.LUNANEXA_DATA_DIR,
    databaseUrl: env.DATABASE_URL,
    databaseOwnerUrl: env.LUNANEXA_DATABASE_OWNER_URL,
    peer: await peerFromEnv(env),
    config: configFromEnv(env),
  });
  plane.ports.logger.info({ url: plane.url, store: plane.ports.store.kind }, 'control plane listening');
  const stop = async () => {
    try {
      await plane.close();
    } catch (error) {
      plane.ports.logger.error({ err: errorFields(error) }, 'stopping failed');
      process.exit(1);
    }
    process.exit(0);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
