import { AsyncLocalStorage } from 'node:async_hooks';
import type { Hono } from 'hono';
import { z } from 'zod';
import { newApp } from '../api/app.js';
import { controllerTick } from '../controller/driver.js';
import { openNeonStore } from '../store/neon.js';
import type { Store } from '../store/db.js';
import { serviceCtx, type AppEnv, type Ports } from '../dataplane/ports.js';
import type { Logger } from '../kernel/telemetry/logger.js';
import { invalidEnvResponse, parseWorkerEnv, type ParsedEnv, type WorkerEnv } from './worker-env.js';
import { edgeConfig, edgePorts } from './worker-ports.js';
import { DurableHolders, type LinkNamespace } from '../link/durable-holders.js';
import { createEdgeBus } from '../link/durable-bus.js';
import { linkedMachines } from '../services/streams.js';

// The Durable Object class named in wrangler.toml: Workers find it among the bundle's exports.
export { MachineLink } from './machine-object.js';

/** The part of the Workers `ExecutionContext` this entry uses (no @cloudflare/workers-types dependency). */
export interface WorkerExecutionContext {
  waitUntil(promise: Promise<unknown>): void;
}

/** The part of a cron trigger's `ScheduledController` this entry uses. */
export interface WorkerScheduledEvent {
  cron: string;
  scheduledTime: number;
}

/** At most this many Neon connections per request (or cron run), opened as its queries need them. */
const CONNECTIONS_PER_REQUEST = 2;

/** The machines' Durable Objects (`[[durable_objects.bindings]]` in wrangler.toml). */
const LinkBinding = z.object({
  MACHINE_LINKS: z.custom<LinkNamespace>((value) => typeof (value as LinkNamespace | undefined)?.idFromName === 'function', {
    message: 'MACHINE_LINKS is not bound to the MachineLink Durable Object (wrangler.toml)',
  }),
});

/** What one request or cron run owns: its Neon connections, which no other invocation may touch. */
interface Invocation {
  store: Store;
  waitUntil(work: Promise<unknown>): void;
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
}

type EnvResult = { ok: true; state: IsolateState } | Extract<ParsedEnv, { ok: false }>;

const invocations = new AsyncLocalStorage<Invocation>();

let isolate: { raw: unknown; result: EnvResult } | undefined;

function currentInvocation(): Invocation {
  const invocation = invocations.getStore();
  if (!invocation) throw new Error('the store was used outside a request or cron invocation');
  return invocation;
}

function isolatePorts(env: WorkerEnv, namespace: LinkNamespace): Ports {
  const store: Store = {
    get db() {
      return currentInvocation().store.db;
    },
    get statements() {
      return currentInvocation().store.statements;
    },
    kind: 'neon',
    close: () => currentInvocation().store.close(),
  };
  const base = edgeConfig(env);
  const links = new DurableHolders(namespace, {
    keepAlive: () => currentInvocation().waitUntil,
    workloadCancelled: (workloadId) => ports.bus.deliverLocal(`workload:${workloadId}`, { type: 'cancel-workload' }),
  });
  const ports = edgePorts({
    env,
    config: {
      ...base,
      // The store lives only as long as a request here, so nothing is written behind (writeBehindMs 0): each
      // record is written at once, and the request waits for its writes before it closes its connections.
      writeBehindMs: 0,
      // An isolate runs no timer to renew its lease, and its longest request may run to the longest deadline:
      // the workloads it holds count as held until then (requests renew the lease as they start).
      instanceLeaseTtlMs: base.maxDeadlineMs,
    },
    store,
    // Streams, uplinks and signals live in the machines' objects: another isolate, or data centre, may serve the
    // request that needs them.
    bus: createEdgeBus(namespace, links, () => linkedMachines(store.db)),
    remote: links,
  });
  return ports;
}

/** Parses the bindings once per isolate; Workers hand the requests of an isolate the same `env`. */
function isolateState(raw: unknown): EnvResult {
  if (isolate && isolate.raw === raw) return isolate.result;
  const parsed = parseWorkerEnv(raw);
  const binding = LinkBinding.safeParse(raw ?? {});
  let result: EnvResult;
  if (!parsed.ok) result = parsed;
  else if (!binding.success) result = { ok: false, variables: ['MACHINE_LINKS'], issues: [{ variable: 'MACHINE_LINKS', code: 'missing' }] };
  else {
    const fingerprint = JSON.stringify(parsed.env);
    if (isolate?.result.ok && isolate.result.state.fingerprint === fingerprint) {
      result = isolate.result;
    } else {
      const ports = isolatePorts(parsed.env, binding.data.MACHINE_LINKS);
      result = { ok: true, state: { env: parsed.env, fingerprint, ports, app: newApp(ports) } };
    }
  }
  isolate = { raw, result };
  return result;
}

/**
 * Runs `fn` with a fresh Neon store as the current invocation's. `finish` ends the invocation: it waits for the
 * records written on its behalf, then closes its connections; no query of it runs after that.
 */
async function withInvocation<T>(state: IsolateState, ctx: WorkerExecutionContext, fn: () => Promise<T>): Promise<{ value: T; finish: () => Promise<void> }> {
  const invocation: Invocation = {
    store: openNeonStore(state.env.DATABASE_URL, { wsProxy: state.env.NEON_WS_PROXY, sqlEndpoint: state.env.NEON_SQL_ENDPOINT, max: CONNECTIONS_PER_REQUEST }),
    waitUntil: (work) => ctx.waitUntil(work),
  };
  const { dataPlane, caches, logger } = state.ports;
  const finish = () =>
    invocations
      .run(invocation, () => Promise.all([dataPlane.workloads.flush(), caches.machineAuth.flush(), dataPlane.pings.flush()]))
      .then(() => invocation.store.close())
      .catch((error: unknown) => logger.warn({ err: error instanceof Error ? error.message : String(error) }, "finishing the request's store failed"));
  try {
    return { value: await invocations.run(invocation, fn), finish };
  } catch (error) {
    await finish();
    throw error;
  }
}

/** Ends the invocation once the response body is fully sent (or abandoned), so SSE answers keep their connection. */
function finishAfterBody(response: Response, finish: () => Promise<void>, ctx: WorkerExecutionContext): Response {
  if (!response.body) {
    ctx.waitUntil(finish());
    return response;
  }
  const { readable, writable } = new TransformStream();
  ctx.waitUntil(
    response.body
      .pipeTo(writable)
      // Silent by design: the client left mid-answer (or the body failed, which its own frames already said); finish runs either way.
      .catch(() => {})
      .finally(finish),
  );
  return new Response(readable, response);
}

/** Handles one HTTP request with the isolate's app over this request's store. */
async function handleFetch(request: Request, rawEnv: unknown, ctx: WorkerExecutionContext): Promise<Response> {
  const result = isolateState(rawEnv);
  if (!result.ok) return invalidEnvResponse(result);
  const { state } = result;
  const { value: response, finish } = await withInvocation(state, ctx, async () => await state.app.fetch(request));
  return finishAfterBody(response, finish, ctx);
}

/** Runs one controller tick (the cron trigger replaces the Node entry's interval). */
async function handleScheduled(event: WorkerScheduledEvent, rawEnv: unknown, ctx: WorkerExecutionContext): Promise<void> {
  const result = isolateState(rawEnv);
  if (!result.ok) throw new Error(`invalid Worker environment: ${result.variables.join(', ')}`);
  const { ports } = result.state;
  const logger: Logger = ports.logger;
  try {
    const { finish } = await withInvocation(result.state, ctx, () => controllerTick({ ctx: serviceCtx(ports, 'system') }));
    ctx.waitUntil(finish());
  } catch (error) {
    logger.error({ err: error instanceof Error ? error.message : String(error), cron: event.cron }, 'controller tick failed');
    throw error;
  }
}

// Workers require the default export.
export default {
  fetch: handleFetch,
  scheduled: handleScheduled,
};
