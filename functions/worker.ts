import { AsyncLocalStorage } from 'node:async_hooks';
import pino from 'pino';
import type { Hono } from 'hono';
import { z } from 'zod';
import { NodeEnv, configFromEnv } from './env.js';
import { newApp } from './app.js';
import { createRelay } from './relay/index.js';
import { createMemoryBus } from './relay/bus.js';
import { LOG_SERIALIZERS, REDACT_PATHS, type Logger } from './telemetry/logger.js';
import { SECURITY_HEADERS } from './http/security-headers.js';
import { createMetrics } from './telemetry/metrics.js';
import { createIdentityLoader, type ControlPlaneIdentity } from './services/identity.js';
import { controllerTick } from './controller/driver.js';
import { openNeonStore } from './store/neon.js';
import { newId } from '../shared/ids.js';
import type { Store } from './store/db.js';
import { InstanceLease } from './services/instances.js';
import { serviceCtx, type AppEnv, type Ports } from './context.js';

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
    // Runtime secrets' key (`wrangler secret put LUNANEXA_SECRET_KEY`); without it they cannot be used.
    LUNANEXA_SECRET_KEY: true,
  }).shape,
});
export type WorkerEnv = z.infer<typeof WorkerEnv>;

/** What one request or cron run owns: its Neon connection, which no other invocation may touch. */
interface Invocation {
  store: Store;
}

/**
 * What outlives a request in one isolate. Nothing here holds a socket: the store in `ports` is a view onto the
 * current invocation's store, so the app (whose routes cost milliseconds of CPU to build) is built once.
 */
interface IsolateState {
  env: WorkerEnv;
  /** The parsed bindings as JSON, to recognise an equal `env` object handed over again. */
  fingerprint: string;
  ports: Ports;
  app: Hono<AppEnv>;
  /** Only the resolved value is kept: a pending load belongs to the request whose connection runs it. */
  identity?: ControlPlaneIdentity;
}

type EnvResult = { ok: true; state: IsolateState } | { ok: false; variables: string[]; issues: { variable: string; code: string }[] };

const invocations = new AsyncLocalStorage<Invocation>();

let isolate: { raw: unknown; result: EnvResult } | undefined;

function currentInvocation(): Invocation {
  const invocation = invocations.getStore();
  if (!invocation) throw new Error('the store was used outside a request or cron invocation');
  return invocation;
}

function workerLogger(level: string): Logger {
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

function isolatePorts(env: WorkerEnv, state: () => IsolateState): Ports {
  const store: Store = {
    get db() {
      return currentInvocation().store.db;
    },
    kind: 'neon',
    close: () => currentInvocation().store.close(),
  };
  const bus = createMemoryBus();
  const instanceId = newId('instance');
  const ports: Ports = {
    store,
    // One isolate serves many requests, but another isolate may hold a machine's stream: a memory bus reaches
    // only streams attached here.
    bus,
    // configFromEnv reads only the timing overrides; the Node-only fields are filled with their defaults.
    // The cron trigger ticks once a minute: the controller must know its period to tell a tick gap from an outage.
    // The store lives only as long as a request here, so nothing is written behind (writeBehindMs 0).
    config: { ...configFromEnv({ ...NodeEnv.parse({}), LUNANEXA_RECONCILE_INTERVAL_MS: 60_000, ...env }), writeBehindMs: 0 },
    logger: workerLogger(env.LUNANEXA_LOG_LEVEL),
    // No process metrics: an isolate's process.* numbers describe the runtime, not this deployment.
    metrics: createMetrics(),
    instanceId,
    instanceLease: new InstanceLease(instanceId, () => ports.config.instanceLeaseTtlMs),
    identity: async () => {
      const cached = state().identity;
      if (cached) return cached;
      const identity = await createIdentityLoader(currentInvocation().store.db)();
      state().identity = identity;
      return identity;
    },
    // The routing snapshot refreshes on demand within requests: Workers run no background timers.
    relay: createRelay({ bus, deps: () => ({ db: ports.store.db, config: ports.config, logger: ports.logger, metrics: ports.metrics }) }),
  };
  return ports;
}

/** Parses the bindings once per isolate; Workers hand the requests of an isolate the same `env`. */
function isolateState(raw: unknown): EnvResult {
  if (isolate && isolate.raw === raw) return isolate.result;
  const parsed = WorkerEnv.safeParse(raw ?? {});
  let result: EnvResult;
  if (!parsed.success) {
    // Name the variables and what is wrong with them, never their values: DATABASE_URL holds a password. A
    // variable that is not there at all is `missing`, so that the answer says to set it rather than fix it.
    const given = (raw ?? {}) as Record<string, unknown>;
    const issues = parsed.error.issues.map((issue) => {
      const variable = String(issue.path[0] ?? '(env)');
      return { variable, code: given[variable] === undefined ? 'missing' : issue.code };
    });
    result = { ok: false, variables: [...new Set(issues.map((i) => i.variable))], issues };
  } else {
    const fingerprint = JSON.stringify(parsed.data);
    if (isolate?.result.ok && isolate.result.state.fingerprint === fingerprint) {
      result = isolate.result;
    } else {
      const env = parsed.data;
      let state: IsolateState | undefined;
      const ports = isolatePorts(env, () => state!);
      state = { env, fingerprint, ports, app: newApp(ports) };
      result = { ok: true, state };
    }
  }
  isolate = { raw, result };
  return result;
}

/** Runs `fn` with a fresh Neon store as the current invocation's; the caller closes the returned store. */
async function withInvocation<T>(state: IsolateState, fn: () => Promise<T>): Promise<{ value: T; store: Store }> {
  const store = openNeonStore(state.env.DATABASE_URL, { wsProxy: state.env.NEON_WS_PROXY });
  try {
    return { value: await invocations.run({ store }, fn), store };
  } catch (error) {
    await store.close().catch(() => {});
    throw error;
  }
}

/**
 * Every request of an isolate without a usable environment: a 500 in the management envelope that says which
 * binding is missing (and how to set it) or invalid. Nothing is served without the store, not even /healthz.
 */
function invalidEnvResponse(result: Extract<EnvResult, { ok: false }>): Response {
  const problems = result.variables.map((variable) => {
    const missing = result.issues.some((issue) => issue.variable === variable && issue.code === 'missing');
    if (!missing) return `${variable} is invalid`;
    return variable === 'DATABASE_URL' ? 'DATABASE_URL is not set (wrangler secret put DATABASE_URL)' : `${variable} is not set`;
  });
  const body = {
    error: {
      code: 'invalid_environment',
      message: `the Worker cannot serve: ${problems.join('; ')}`,
      requestId: crypto.randomUUID(),
      details: { variables: result.variables, issues: result.issues },
    },
  };
  return new Response(JSON.stringify(body), { status: 500, headers: { ...SECURITY_HEADERS, 'content-type': 'application/json' } });
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

/** Handles one HTTP request with the isolate's app over this request's store. */
async function handleFetch(request: Request, rawEnv: unknown, ctx: WorkerExecutionContext): Promise<Response> {
  const result = isolateState(rawEnv);
  if (!result.ok) return invalidEnvResponse(result);
  const { state } = result;
  const { value: response, store } = await withInvocation(state, async () => await state.app.fetch(request));
  return closeAfterBody(response, store, ctx, state.ports.logger);
}

/** Runs one controller tick (the cron trigger replaces the Node entry's interval). */
async function handleScheduled(event: WorkerScheduledEvent, rawEnv: unknown, ctx: WorkerExecutionContext): Promise<void> {
  const result = isolateState(rawEnv);
  if (!result.ok) throw new Error(`invalid Worker environment: ${result.variables.join(', ')}`);
  const { ports } = result.state;
  try {
    const { store } = await withInvocation(result.state, () => controllerTick({ ctx: serviceCtx(ports, 'system') }));
    ctx.waitUntil(store.close().catch(() => {}));
  } catch (error) {
    ports.logger.error({ err: error instanceof Error ? error.message : String(error), cron: event.cron }, 'controller tick failed');
    throw error;
  }
}

// Workers require the default export.
export default {
  fetch: handleFetch,
  scheduled: handleScheduled,
};
