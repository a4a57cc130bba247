import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino, { type Logger } from 'pino';
import type { ControlPlaneConfig } from '../../functions/kernel/config.js';
import { startControlPlane, type RunningControlPlane } from '../../functions/hosts/node.js';
import { FAST_TEST_CONFIG } from './fast-config.js';
import { managementClient, type ManagementClient } from '../../shared/api/client.js';
import { createTestDatabase } from './pg.js';
import { createApiToken } from '../../functions/services/api-tokens.js';

export type StoreKind = 'pglite' | 'pg';

export interface TestPlane extends Omit<RunningControlPlane, 'adminToken'> {
  /**
   * The plane's admin token: the one it wrote, or, for a plane started with a fresh data dir on a store that has one
   * already (which writes none), one the harness minted for it (as `npm run db:bootstrap -- --force` would).
   */
  adminToken: string;
  dataDir: string;
  databaseUrl?: string;
  /** Closes the plane and removes its store. */
  stop(): Promise<void>;
  /**
   * Stops the plane and starts a new one on the same port and store, with the same options; the new plane
   * owns the store from then on (its `stop` drops a throwaway database this one created).
   */
  restart(opts?: { downForMs?: number }): Promise<TestPlane>;
  /** `fetch` against the plane with the admin token. */
  admin(path: string, init?: RequestInit): Promise<Response>;
  /**
   * The typed management client (shared/api/client.ts, as the CLI uses it) with the admin token: paths relative
   * to /api/v1, parameters, bodies and answers typed from the OpenAPI document. Prefer it to `admin` for /api/v1.
   */
  api: ManagementClient;
}

/**
 * Liveness slower than the fast test timings, for suites about something else (rollouts, held requests): on a
 * loaded two-core machine a heartbeat 750 ms late would count as lost sight and change what they measure.
 */
export const STEADY_LIVENESS: Partial<ControlPlaneConfig> = {
  heartbeatIntervalMs: 1_000,
  runtimeGraceMs: 4_000,
  machineLifetimeMs: 15_000,
  runtimeTtlMs: 15_000,
  streamKeepAliveMs: 1_000,
  streamLeaseTtlMs: 6_000,
  streamPingMs: 1_000,
  streamPingTimeoutMs: 6_000,
};

/** Starts a real control plane on a free loopback port with the fast test timings. */
export async function startTestPlane(opts: TestPlaneOptions = {}): Promise<TestPlane> {
  return await start(opts, undefined);
}

interface TestPlaneOptions {
  store?: StoreKind;
  config?: Partial<ControlPlaneConfig>;
  dataDir?: string;
  databaseUrl?: string;
  /** The role that migrates `databaseUrl` and owns its tables (LUNANEXA_DATABASE_OWNER_URL). */
  databaseOwnerUrl?: string;
  port?: number;
  logger?: Logger;
}

async function start(opts: TestPlaneOptions, inheritedDrop: (() => Promise<void>) | undefined): Promise<TestPlane> {
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'lnx-test-')));
  let databaseUrl = opts.databaseUrl;
  let drop = inheritedDrop;
  if (opts.store === 'pg' && !databaseUrl) {
    const db = await createTestDatabase();
    databaseUrl = db.url;
    drop = db.drop;
  }
  const plane = await startControlPlane({
    port: opts.port ?? 0,
    dataDir,
    databaseUrl,
    databaseOwnerUrl: opts.databaseOwnerUrl,
    config: { ...FAST_TEST_CONFIG, ...opts.config },
    logger: opts.logger ?? pino({ level: process.env.LUNANEXA_TEST_LOG ?? 'silent' }),
  });
  const adminToken =
    plane.adminToken ?? (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'test admin', role: 'admin' } })).token;
  return {
    ...plane,
    adminToken,
    dataDir,
    databaseUrl,
    async stop() {
      await plane.close();
      await drop?.();
      await rm(dataDir, { recursive: true, force: true });
    },
    async restart({ downForMs = 0 } = {}) {
      await plane.close();
      if (downForMs > 0) await new Promise((resolve) => setTimeout(resolve, downForMs));
      return await start({ ...opts, dataDir, databaseUrl, port: plane.port }, drop);
    },
    api: managementClient(plane.url, adminToken),
    admin(path, init = {}) {
      const headers = new Headers(init.headers);
      headers.set('authorization', `Bearer ${adminToken}`);
      if (init.body && !headers.has('content-type')) headers.set('content-type', 'application/json');
      return fetch(`${plane.url}${path}`, { ...init, headers });
    },
  };
}

/** Polls `check` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor<T>(
  check: () => Promise<T | null | undefined | false>,
  opts: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${opts.what ?? 'condition'}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 100));
  }
}
