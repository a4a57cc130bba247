/**
 * Simulated model runtime: a real OpenAI-compatible HTTP server that stands in for
 * vLLM/llama.cpp in tests and in the local simulator. It exists to exercise protocol,
 * placement and recovery paths, so it models latency, capacity, loading, faults, deadlines and
 * cancellation faithfully, and models nothing about actual inference.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { errorBody } from './errors.js';
import type { SimModel } from './generate.js';
import { sendJson } from './http.js';
import { inference, type InferenceDeps } from './inference.js';
import { createLedger } from './ledger.js';
import { createMetrics, METRICS_CONTENT_TYPE } from './metrics.js';
import { describeIssues, SimOptions, type SimServerHandle, type SimServerOptions, type SimStats } from './options.js';
import { seededRandom } from './random.js';
import { createScheduler } from './scheduler.js';

type Route = 'health' | 'models' | 'stats' | 'metrics' | 'chat' | 'completions' | 'embeddings';

// A Map, not an object literal, so request paths can never hit prototype keys.
const ROUTES = new Map<string, { method: 'GET' | 'POST'; route: Route }>([
  ['/health', { method: 'GET', route: 'health' }],
  ['/v1/models', { method: 'GET', route: 'models' }],
  ['/sim/stats', { method: 'GET', route: 'stats' }],
  ['/metrics', { method: 'GET', route: 'metrics' }],
  ['/v1/chat/completions', { method: 'POST', route: 'chat' }],
  ['/v1/completions', { method: 'POST', route: 'completions' }],
  ['/v1/embeddings', { method: 'POST', route: 'embeddings' }],
]);

/** The simulator's parts for one set of options: its model, scheduler, counters, metrics, ledger and fault draw. */
function simulator(o: SimOptions): InferenceDeps & { instanceId: string; tokenDigest: Buffer | null } {
  const random = o.seed === undefined ? Math.random : seededRandom(o.seed);
  const startedAt = performance.now();
  const idPrefix = randomBytes(4).toString('hex');
  let idCounter = 0;
  const model: SimModel = {
    name: o.model,
    json: JSON.stringify(o.model),
    ttftMs: o.ttftMs,
    nextId(prefix) {
      idCounter++;
      return `${prefix}-${idPrefix}${idCounter.toString(36)}`;
    },
  };
  const stats: SimStats = {
    requests: 0,
    completed: 0,
    aborted: 0,
    failed: 0,
    active: 0,
    peakActive: 0,
    tokensStreamed: 0,
    lastIdempotencyKey: null,
    lastDeadline: null,
  };
  return {
    model,
    scheduler: createScheduler(o),
    metrics: createMetrics(o.model),
    stats,
    ledger: createLedger(stats),
    isLoading: () => performance.now() - startedAt < o.loadMs,
    failing: () => o.failureRate > 0 && random() < o.failureRate,
    instanceId: o.instanceId ?? '',
    tokenDigest: o.token === undefined ? null : digest(o.token),
  };
}

const digest = (text: string): Buffer => createHash('sha256').update(text).digest();

/**
 * Whether a request carries the bearer token the server was started with (any request does when it has none).
 * Compared as digests, in constant time: the answer's timing tells nothing about the token.
 */
function authorized(expected: Buffer | null, req: IncomingMessage): boolean {
  if (expected === null) return true;
  const header = req.headers.authorization;
  const match = typeof header === 'string' ? /^Bearer ([^\s]+)$/i.exec(header.trim()) : null;
  return match !== null && timingSafeEqual(digest(match[1]!), expected);
}

function handle(sim: ReturnType<typeof simulator>, o: SimOptions, req: IncomingMessage, res: ServerResponse): void {
  // Every route, health included: on a shared node any local process could otherwise call the runtime directly.
  if (!authorized(sim.tokenDigest, req)) {
    sendJson(res, 401, errorBody('missing or invalid bearer token', 'invalid_request_error', 'invalid_api_key', null), {
      'www-authenticate': 'Bearer',
    });
    return;
  }
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  const entry = ROUTES.get(path);
  if (entry === undefined) {
    sendJson(res, 404, errorBody(`no route for ${path.slice(0, 200)}`, 'invalid_request_error', 'not_found', null));
    return;
  }
  const method = req.method === 'HEAD' && entry.method === 'GET' ? 'GET' : req.method;
  if (method !== entry.method) {
    sendJson(res, 405, errorBody(`method ${req.method ?? ''} not allowed`, 'invalid_request_error', 'method_not_allowed', null), {
      allow: entry.method === 'GET' ? 'GET, HEAD' : 'POST',
    });
    return;
  }
  switch (entry.route) {
    case 'health':
      if (sim.isLoading()) sendJson(res, 503, JSON.stringify({ status: 'loading' }), { 'retry-after': '1' });
      else sendJson(res, 200, JSON.stringify({ status: 'ok', model: o.model, instanceId: sim.instanceId, memoryMiB: o.memoryMiB }));
      return;
    case 'models':
      sendJson(
        res,
        200,
        JSON.stringify({
          object: 'list',
          data: [{ id: o.model, object: 'model', created: Math.floor(Date.now() / 1000), owned_by: 'lunanexa-sim' }],
        }),
      );
      return;
    case 'stats':
      sendJson(res, 200, JSON.stringify(sim.stats));
      return;
    case 'metrics': {
      const { scheduler } = sim;
      const body = sim.metrics.render({ running: scheduler.running(), waiting: scheduler.waiting(), cacheUsage: scheduler.cacheUsage() });
      res.writeHead(200, { 'content-type': METRICS_CONTENT_TYPE, 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    default:
      inference(sim, req, res, entry.route).catch(() => {
        // Unreachable by design; still, a bug here must not take the process down.
        sendJson(res, 500, errorBody('internal simulator error', 'server_error', 'internal_error', null));
      });
  }
}

async function listen(server: Server, port: number, host: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => reject(err);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', () => {});
}

/**
 * Starts a simulated OpenAI-compatible runtime. Resolves once listening; `port: 0` picks a
 * free port. `close()` stops listening and cuts open streams (they count as aborted).
 * @throws Error when options are invalid or the port cannot be bound.
 */
export async function startSimServer(opts: SimServerOptions): Promise<SimServerHandle> {
  const parsed = SimOptions.safeParse(opts);
  if (!parsed.success) throw new Error(`invalid sim-server options: ${describeIssues(parsed.error.issues)}`);
  const o = parsed.data;
  const host = o.host ?? '127.0.0.1';
  const sim = simulator(o);

  const server = createServer((req, res) => {
    // An upload reset by the client surfaces as an 'error' on req; it is handled via 'close'.
    req.on('error', () => {});
    res.on('error', () => {});
    try {
      handle(sim, o, req, res);
    } catch {
      sendJson(res, 500, errorBody('internal simulator error', 'server_error', 'internal_error', null));
    }
  });
  await listen(server, o.port, host);

  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : o.port;
  if (sim.instanceId === '') sim.instanceId = `sim-${process.pid}-${port}`;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closing: Promise<void> | undefined;
  return {
    port,
    url: `http://${urlHost}:${port}`,
    stats: () => ({ ...sim.stats }),
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Open streams would otherwise hold close() until they finish; cutting them counts as aborts.
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
