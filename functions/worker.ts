import pino from 'pino';
import { z } from 'zod';
import { NodeEnv, configFromEnv } from './env.js';
import { newApp } from './app.js';
import { createMemoryBus, type Bus } from './relay/bus.js';
import { REDACT_PATHS, type Logger } from './telemetry/logger.js';
import { createMetrics, type Metrics } from './telemetry/metrics.js';
import { createIdentityLoader, type ControlPlaneIdentity } from './services/identity.js';
import { controllerTick } from './controller/driver.js';
import { openNeonStore } from './store/neon.js';
import { newId } from '../shared/ids.js';
import type { ControlPlaneConfig } from './config.js';
import type { Store } from './store/db.js';
import type { Ports } from './context.js';

/** The part of the Workers `ExecutionContext` this entry uses (no @cloudflare/workers-types dependency). */
export interface WorkerExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}

/** The part of a cron trigger's `ScheduledController` this entry uses. */
export interface WorkerScheduledEvent {
  cron: string;
  scheduledTime: number;
}

/**
 * The Worker's bindings (wrangler.toml vars and secrets). The timing overrides are the Node entry's, so that one
 * deployment note covers both.
 */
export const WorkerEnv = z.object({
  /** Neon (or any PostgreSQL behind a Neon-compatible WebSocket proxy). A secret: `wrangler secret put DATABASE_URL`. */
  DATABASE_URL: z.string().url(),
  /** `host:port/path` of a WebSocket-to-TCP proxy in front of a plain PostgreSQL; tests only. */
  NEON_WS_PROXY: z.string().min(1).optional(),
  LUNANEXA_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  ...NodeEnv.pick({
    LUNANEXA_HEARTBEAT_INTERVAL_MS: true,
    LUNANEXA_MACHINE_LIFETIME_MS: true,
    LUNANEXA_RUNTIME_TTL_MS: true,
    LUNANEXA_RUNTIME_GRACE_MS: true,
    LUNANEXA_STREAM_KEEPALIVE_MS: true,
    LUNANEXA_RECONCILE_INTERVAL_MS: true,
  }).shape,
});
export type WorkerEnv = z.infer<typeof WorkerEnv>;

/** What outlives a request in one isolate: nothing here holds a socket, so sharing it across requests is safe. */
interface IsolateState {
  env: WorkerEnv;
  config: ControlPlaneConfig;
  logger: Logger;
  metrics: Metrics;
  bus: Bus;
  instanceId: string;
  /** Only the resolved value is kept: a pending load belongs to the request whose connection runs it. */
  identity?: ControlPlaneIdentity;
}

type EnvResult = { ok: true; state: IsolateState } | { ok: false; variables: string[]; issues: { variable: string; code: string }[] };

let isolate: { raw: unknown; result: EnvResult } | undefined;

function workerLogger(level: string): Logger {
  // pino's browser build (the one the Workers bundle gets) honours `redact`; `write` makes it emit one JSON line
  // per entry, which is what Workers Logs and `wrangler tail` index.
  return pino({
    level,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    browser: { asObject: true, write: (entry: object) => console.log(JSON.stringify(entry)) },
  }).child({ name: 'lunanexa' }) as Logger;
}

/** Parses the bindings once per isolate; Workers hand every request of an isolate the same `env` object. */
function isolateState(raw: unknown): EnvResult {
  if (isolate && isolate.raw === raw) return isolate.result;
  const parsed = WorkerEnv.safeParse(raw ?? {});
  let result: EnvResult;
  if (!parsed.success) {
    // Name the variables and what is wrong with them, never their values: DATABASE_URL holds a password.
    const issues = parsed.error.issues.map((issue) => ({ variable: String(issue.path[0] ?? '(env)'), code: issue.code }));
    result = { ok: false, variables: [...new Set(issues.map((i) => i.variable))], issues };
  } else {
    const env = parsed.data;
    // configFromEnv reads only the timing overrides; the Node-only fields are filled with their defaults.
    const config = configFromEnv({ ...NodeEnv.parse({}), ...env });
    result = {
      ok: true,
      state: {
        env,
        config,
        logger: workerLogger(env.LUNANEXA_LOG_LEVEL),
        // No process metrics: an isolate's process.* numbers describe the runtime, not this deployment.
        metrics: createMetrics(),
        bus: createMemoryBus(),
        instanceId: newId('instance'),
      },
    };
  }
  isolate = { raw, result };
  return result;
}

/**
 * Ports for one request or one cron run. Neon's Pool rides on WebSockets, which a Worker may use only inside the
 * request that opened them, so the store is per invocation and the caller must close it.
 */
function invocationPorts(state: IsolateState): Ports {
  const store: Store = openNeonStore(state.env.DATABASE_URL, { wsProxy: state.env.NEON_WS_PROXY });
  const load = createIdentityLoader(store.db);
  return {
    store,
    bus: state.bus,
    config: state.config,
    logger: state.logger,
    metrics: state.metrics,
    instanceId: state.instanceId,
    identity: async () => {
      if (state.identity) return state.identity;
      const identity = await load();
      state.identity = identity;
      return identity;
    },
  };
}

function invalidEnvResponse(result: Extract<EnvResult, { ok: false }>): Response {
  const body = {
    error: {
      code: 'invalid_environment',
      message: `the Worker's environment is invalid: ${result.variables.join(', ')}`,
      requestId: crypto.randomUUID(),
      details: { variables: result.variables, issues: result.issues },
    },
  };
  return new Response(JSON.stringify(body), { status: 500, headers: { 'content-type': 'application/json' } });
}

/** Closes the store once the response body is fully sent (or abandoned), so SSE streams keep their connection. */
function closeAfterBody(response: Response, store: Store, ctx: WorkerExecutionContext, logger: Logger): Response {
  const close = () =>
    store.close().catch((error: unknown) => logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'store close failed'));
  if (!response.body) {
    ctx.waitUntil(close());
    return response;
  }
  const { readable, writable } = new TransformStream();
  ctx.waitUntil(
    response.body
      .pipeTo(writable)
      .catch(() => {})
      .finally(close),
  );
  return new Response(readable, response);
}

/** Handles one HTTP request with a fresh app over per-request ports. */
async function handleFetch(request: Request, rawEnv: unknown, ctx: WorkerExecutionContext): Promise<Response> {
  const result = isolateState(rawEnv);
  if (!result.ok) return invalidEnvResponse(result);
  const ports = invocationPorts(result.state);
  let response: Response;
  try {
    response = await newApp(ports).fetch(request);
  } catch (error) {
    ctx.waitUntil(ports.store.close().catch(() => {}));
    throw error;
  }
  return closeAfterBody(response, ports.store, ctx, ports.logger);
}

/** Runs one controller tick (the cron trigger replaces the Node entry's interval). */
async function handleScheduled(event: WorkerScheduledEvent, rawEnv: unknown, ctx: WorkerExecutionContext): Promise<void> {
  const result = isolateState(rawEnv);
  if (!result.ok) {
    throw new Error(`invalid Worker environment: ${result.variables.join(', ')}`);
  }
  const ports = invocationPorts(result.state);
  try {
    await controllerTick({ ctx: { db: ports.store.db, ports, actor: 'system' } });
  } catch (error) {
    ports.logger.error({ err: error instanceof Error ? error.message : String(error), cron: event.cron }, 'controller tick failed');
    throw error;
  } finally {
    ctx.waitUntil(ports.store.close().catch(() => {}));
  }
}

// Workers require the default export.
export default {
  fetch: handleFetch,
  scheduled: handleScheduled,
};
