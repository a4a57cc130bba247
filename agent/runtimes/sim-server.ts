/**
 * Simulated model runtime: a real OpenAI-compatible HTTP server that stands in for
 * vLLM/llama.cpp in tests and in the local simulator. It exists to exercise protocol,
 * placement and recovery paths, so it models latency, loading, faults, deadlines and
 * cancellation faithfully, and models nothing about actual inference.
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createHash, randomBytes } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';

export interface SimServerOptions {
  port: number;
  /** Defaults to 127.0.0.1. */
  host?: string;
  model: string;
  ttftMs: number;
  /** Infinity or 0 means as fast as possible. */
  tokensPerSecond: number;
  loadMs: number;
  memoryMiB: number;
  /** Probability in 0..1 that an accepted inference request fails. */
  failureRate: number;
  instanceId?: string;
  seed?: number;
}

/**
 * Counters for inference requests (chat, completions, embeddings). Every counted request
 * ends in exactly one of completed/aborted/failed, so
 * `requests === completed + aborted + failed + active` always holds.
 * `failed` covers every error answer (bad input, loading, past deadline, simulated faults);
 * `aborted` covers client disconnects and deadlines that expire mid-generation.
 */
export interface SimStats {
  requests: number;
  completed: number;
  aborted: number;
  failed: number;
  active: number;
  /** Idempotency-Key of the most recent inference request; null when it carried none. */
  lastIdempotencyKey: string | null;
  /**
   * X-LunaNexa-Deadline of the most recent inference request, normalised to ISO-8601
   * (kept verbatim when unparseable); null when absent.
   */
  lastDeadline: string | null;
}

export interface SimServerHandle {
  port: number;
  url: string;
  close(): Promise<void>;
  stats(): SimStats;
}

const MAX_BODY_BYTES = 4 * 1024 * 1024;
// Past this the client is not sending a request any more, just occupying the socket.
const MAX_DISCARD_BYTES = 64 * 1024 * 1024;
const MAX_TOKENS_CAP = 4096;
const DEFAULT_MAX_TOKENS = 16;
const EMBEDDING_DIMS = 16;
// Bounds the work per write so aborts, deadlines and other connections get a turn.
const MAX_TOKENS_PER_WRITE = 1024;

const finiteNonNegative = z.number().min(0);

const optionsSchema = z.object({
  port: z.number().int().min(0).max(65535),
  host: z.string().min(1).optional(),
  model: z.string({ error: (iss) => (iss.input === undefined ? 'is required' : 'expected a string') }).min(1),
  ttftMs: finiteNonNegative,
  tokensPerSecond: z.union([finiteNonNegative, z.literal(Number.POSITIVE_INFINITY)]),
  loadMs: finiteNonNegative,
  memoryMiB: finiteNonNegative,
  failureRate: z.number().min(0).max(1),
  instanceId: z.string().min(1).optional(),
  seed: z.number().int().optional(),
});

// ---------------------------------------------------------------------------
// CLI

const FLAG_TO_KEY = {
  '--port': 'port',
  '--host': 'host',
  '--model': 'model',
  '--ttft-ms': 'ttftMs',
  '--tokens-per-second': 'tokensPerSecond',
  '--load-ms': 'loadMs',
  '--memory-mib': 'memoryMiB',
  '--failure-rate': 'failureRate',
  '--instance-id': 'instanceId',
  '--seed': 'seed',
} as const satisfies Record<string, keyof SimServerOptions>;

type FlagName = keyof typeof FLAG_TO_KEY;

const KEY_TO_FLAG = Object.fromEntries(Object.entries(FLAG_TO_KEY).map(([flag, key]) => [key, flag])) as Record<
  keyof SimServerOptions,
  FlagName
>;

// Number('') and Number(' ') are 0, so numbers are matched by shape before conversion.
const numberArg = z
  .string()
  .trim()
  .regex(/^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/, { error: 'expected a number' })
  .transform(Number);

const cliSchema = z.object({
  port: numberArg.default(0),
  host: z.string().default('127.0.0.1'),
  model: z.string().optional(),
  ttftMs: numberArg.default(0),
  tokensPerSecond: z
    .union([z.string().regex(/^(inf|infinity)$/i).transform(() => Number.POSITIVE_INFINITY), numberArg], {
      error: 'expected a number or "Infinity"',
    })
    .default(0),
  loadMs: numberArg.default(0),
  memoryMiB: numberArg.default(0),
  failureRate: numberArg.default(0),
  instanceId: z.string().optional(),
  seed: numberArg.optional(),
});

function describeIssues(issues: readonly z.core.$ZodIssue[]): string {
  return issues
    .map((issue) => {
      const key = issue.path[0];
      const flag = typeof key === 'string' && key in KEY_TO_FLAG ? KEY_TO_FLAG[key as keyof SimServerOptions] : 'options';
      return `${flag}: ${issue.message}`;
    })
    .join('; ');
}

/**
 * Parses sim-server command-line flags (without the node/script entries), accepting both
 * `--flag value` and `--flag=value`. Only `--model` is required; the rest default to a
 * zero-latency, never-failing server on a free port.
 * @throws Error naming the offending flag(s) on unknown, repeated, missing or invalid values.
 */
export function parseSimArgs(argv: string[]): SimServerOptions {
  const raw: Partial<Record<keyof SimServerOptions, string>> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (!arg.startsWith('--')) throw new Error(`invalid sim-server arguments: unexpected argument "${arg}"`);
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    if (!Object.hasOwn(FLAG_TO_KEY, flag)) {
      throw new Error(`invalid sim-server arguments: unknown flag ${flag} (known: ${Object.keys(FLAG_TO_KEY).join(' ')})`);
    }
    const key = FLAG_TO_KEY[flag as FlagName];
    let value: string | undefined;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith('--')) throw new Error(`invalid sim-server arguments: ${flag} needs a value`);
      i++;
    }
    if (raw[key] !== undefined) throw new Error(`invalid sim-server arguments: ${flag} given more than once`);
    raw[key] = value;
  }
  const shaped = cliSchema.safeParse(raw);
  if (!shaped.success) throw new Error(`invalid sim-server arguments: ${describeIssues(shaped.error.issues)}`);
  const checked = optionsSchema.safeParse(shaped.data);
  if (!checked.success) throw new Error(`invalid sim-server arguments: ${describeIssues(checked.error.issues)}`);
  return checked.data;
}

/**
 * Command-line entry: parses flags, starts the server, prints one
 * `{"event":"listening","port":N}` line to stdout for the supervising agent, and closes
 * gracefully on SIGTERM/SIGINT (a second signal falls through to the default and kills).
 */
export async function runSimServerCli(argv: string[]): Promise<SimServerHandle> {
  const opts = parseSimArgs(argv);
  const handle = await startSimServer(opts);
  const onSignal = (): void => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    void handle.close();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.stdout.write(`${JSON.stringify({ event: 'listening', port: handle.port })}\n`);
  return handle;
}

// ---------------------------------------------------------------------------
// Helpers

/** mulberry32: tiny, fast, and good enough to make fault injection reproducible. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// A char-code loop avoids allocating an array of words for multi-megabyte prompts.
function countWords(text: string): number {
  let count = 0;
  let inWord = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const space = c === 32 || (c >= 9 && c <= 13) || c === 160 || c === 0x2028 || c === 0x2029 || c === 0xfeff;
    if (space) inWord = false;
    else if (!inWord) {
      inWord = true;
      count++;
    }
  }
  return count;
}

function embeddingFor(input: string): number[] {
  const digest = createHash('sha256').update(input).digest();
  const vec = new Array<number>(EMBEDDING_DIMS);
  let norm = 0;
  for (let i = 0; i < EMBEDDING_DIMS; i++) {
    const v = digest.readInt16LE(i * 2) / 32768;
    vec[i] = v;
    norm += v * v;
  }
  // Unit length so cosine similarity behaves like a real embedding model's output.
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < EMBEDDING_DIMS; i++) vec[i] = (vec[i] as number) * scale;
  return vec;
}

function embeddingBase64(vec: number[]): string {
  const buf = Buffer.alloc(vec.length * 4);
  for (let i = 0; i < vec.length; i++) buf.writeFloatLE(vec[i] as number, i * 4);
  return buf.toString('base64');
}

function tokenText(i: number): string {
  return `tok${i} `;
}

function generatedText(n: number): string {
  let out = '';
  for (let i = 0; i < n; i++) out += tokenText(i);
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Accepts epoch milliseconds or an ISO-8601 date-time; anything else is a client error. */
function parseDeadline(raw: string): number | null {
  const text = raw.trim();
  if (/^\d+$/.test(text)) return Number(text);
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(text)) return null;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? null : ms;
}

function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null,
    readonly code: string | null,
  ) {
    super(message);
  }
}

function badRequest(message: string, param: string | null): RequestError {
  return new RequestError(400, message, 'invalid_request_error', param, null);
}

function errorBody(message: string, type: string, code: string | null, param: string | null): string {
  return JSON.stringify({ error: { message, type, code, param } });
}

function sendJson(res: ServerResponse, status: number, body: string, headers?: Record<string, string>): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
}

/** Parses an optional positive-integer token limit; null/absent means "not given". */
function tokenLimit(body: Record<string, unknown>, field: string): number | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw badRequest(`${field} must be a positive integer`, field);
  return v;
}

interface GenerationRequest {
  kind: 'chat' | 'completion';
  promptTokens: number;
  maxTokens: number;
  finishReason: 'length' | 'stop';
  stream: boolean;
  includeUsage: boolean;
}

function commonGenerationFields(
  body: Record<string, unknown>,
  kind: 'chat' | 'completion',
  promptTokens: number,
): GenerationRequest {
  const limit = kind === 'chat' ? (tokenLimit(body, 'max_completion_tokens') ?? tokenLimit(body, 'max_tokens')) : tokenLimit(body, 'max_tokens');
  const stream = body.stream;
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') throw badRequest('stream must be a boolean', 'stream');
  let includeUsage = false;
  const streamOptions = body.stream_options;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (!isRecord(streamOptions)) throw badRequest('stream_options must be an object', 'stream_options');
    const iu = streamOptions.include_usage;
    if (iu !== undefined && iu !== null && typeof iu !== 'boolean') {
      throw badRequest('stream_options.include_usage must be a boolean', 'stream_options.include_usage');
    }
    includeUsage = iu === true;
  }
  return {
    kind,
    promptTokens,
    maxTokens: Math.min(limit ?? DEFAULT_MAX_TOKENS, MAX_TOKENS_CAP),
    // A caller-given limit is what ends generation (the cap stands in for the context window).
    finishReason: limit === undefined ? 'stop' : 'length',
    stream: stream === true,
    includeUsage,
  };
}

function parseChat(body: Record<string, unknown>): GenerationRequest {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw badRequest('messages must be a non-empty array', 'messages');
  let words = 0;
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isRecord(m) || typeof m.role !== 'string') throw badRequest('each message needs a string role', `messages[${i}].role`);
    const content = m.content;
    if (typeof content === 'string') words += countWords(content);
    else if (Array.isArray(content)) {
      for (const part of content as unknown[]) {
        if (isRecord(part) && typeof part.text === 'string') words += countWords(part.text);
      }
    } else if (content !== undefined && content !== null) {
      throw badRequest('message content must be a string or an array of parts', `messages[${i}].content`);
    }
  }
  return commonGenerationFields(body, 'chat', words);
}

function parseCompletion(body: Record<string, unknown>): GenerationRequest {
  const prompt = body.prompt;
  let words = 0;
  if (typeof prompt === 'string') words = countWords(prompt);
  else if (Array.isArray(prompt) && prompt.length > 0) {
    // OpenAI also allows token-id arrays; each id counts as one token.
    for (const p of prompt as unknown[]) {
      if (typeof p === 'string') words += countWords(p);
      else if (typeof p === 'number') words += 1;
      else if (Array.isArray(p) && p.every((t) => typeof t === 'number')) words += p.length;
      else throw badRequest('prompt must be a string, an array of strings, or token arrays', 'prompt');
    }
  } else {
    throw badRequest('prompt is required', 'prompt');
  }
  return commonGenerationFields(body, 'completion', words);
}

// ---------------------------------------------------------------------------
// Server

type Outcome = 'completed' | 'aborted' | 'failed';

/** Per-request bookkeeping so every counted request settles exactly once. */
interface Tracker {
  settled: boolean;
  deadlineAt: number | undefined; // performance.now() timebase
  timer: NodeJS.Timeout | undefined;
  immediate: NodeJS.Immediate | undefined;
}

type Route = 'health' | 'models' | 'stats' | 'chat' | 'completions' | 'embeddings';

// A Map, not an object literal, so request paths can never hit prototype keys.
const ROUTES = new Map<string, { method: 'GET' | 'POST'; route: Route }>([
  ['/health', { method: 'GET', route: 'health' }],
  ['/v1/models', { method: 'GET', route: 'models' }],
  ['/sim/stats', { method: 'GET', route: 'stats' }],
  ['/v1/chat/completions', { method: 'POST', route: 'chat' }],
  ['/v1/completions', { method: 'POST', route: 'completions' }],
  ['/v1/embeddings', { method: 'POST', route: 'embeddings' }],
]);

const DEADLINE_ERROR = { message: 'request deadline exceeded', type: 'server_error', code: 'deadline_exceeded' } as const;
const FAILURE_ERROR = { message: 'simulated runtime failure', type: 'server_error', code: 'simulated_failure' } as const;

/**
 * Starts a simulated OpenAI-compatible runtime. Resolves once listening; `port: 0` picks a
 * free port. `close()` stops listening and cuts open streams (they count as aborted).
 * @throws Error when options are invalid or the port cannot be bound.
 */
export async function startSimServer(opts: SimServerOptions): Promise<SimServerHandle> {
  const parsed = optionsSchema.safeParse(opts);
  if (!parsed.success) throw new Error(`invalid sim-server options: ${describeIssues(parsed.error.issues)}`);
  const o = parsed.data;
  const host = o.host ?? '127.0.0.1';
  const fast = !(o.tokensPerSecond > 0) || !Number.isFinite(o.tokensPerSecond);
  const tokenIntervalMs = fast ? 0 : 1000 / o.tokensPerSecond;
  const random = o.seed === undefined ? Math.random : seededRandom(o.seed);
  const startedAt = performance.now();
  const idPrefix = randomBytes(4).toString('hex');
  let idCounter = 0;
  let instanceId = o.instanceId ?? '';
  const modelJson = JSON.stringify(o.model);

  const stats: SimStats = {
    requests: 0,
    completed: 0,
    aborted: 0,
    failed: 0,
    active: 0,
    lastIdempotencyKey: null,
    lastDeadline: null,
  };

  const isLoading = (): boolean => performance.now() - startedAt < o.loadMs;

  function clearTimers(t: Tracker): void {
    if (t.timer !== undefined) clearTimeout(t.timer);
    if (t.immediate !== undefined) clearImmediate(t.immediate);
    t.timer = undefined;
    t.immediate = undefined;
  }

  function settle(t: Tracker, outcome: Outcome): void {
    if (t.settled) return;
    t.settled = true;
    clearTimers(t);
    stats.active--;
    stats[outcome]++;
  }

  function fail(t: Tracker, res: ServerResponse, err: RequestError, headers?: Record<string, string>): void {
    settle(t, 'failed');
    sendJson(res, err.status, errorBody(err.message, err.type, err.code, err.param), headers);
  }

  /** Waits `ms` unless the deadline comes first; in that case the request is aborted with 504. */
  function after(t: Tracker, res: ServerResponse, ms: number, then: () => void): void {
    const now = performance.now();
    const deadlineFirst = t.deadlineAt !== undefined && t.deadlineAt < now + ms;
    const wait = deadlineFirst ? (t.deadlineAt as number) - now : ms;
    const fire = (): void => {
      t.timer = undefined;
      if (t.settled) return;
      if (deadlineFirst) {
        settle(t, 'aborted');
        sendJson(res, 504, errorBody(DEADLINE_ERROR.message, DEADLINE_ERROR.type, DEADLINE_ERROR.code, null));
        return;
      }
      then();
    };
    if (wait <= 0) fire();
    else t.timer = setTimeout(fire, wait);
  }

  function nextId(prefix: string): string {
    idCounter++;
    return `${prefix}-${idPrefix}${idCounter.toString(36)}`;
  }

  function usageOf(g: GenerationRequest): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
    return { prompt_tokens: g.promptTokens, completion_tokens: g.maxTokens, total_tokens: g.promptTokens + g.maxTokens };
  }

  function respondFull(t: Tracker, res: ServerResponse, g: GenerationRequest): void {
    const created = Math.floor(Date.now() / 1000);
    const text = generatedText(g.maxTokens);
    const body =
      g.kind === 'chat'
        ? {
            id: nextId('chatcmpl'),
            object: 'chat.completion',
            created,
            model: o.model,
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: text, refusal: null },
                logprobs: null,
                finish_reason: g.finishReason,
              },
            ],
            usage: usageOf(g),
            system_fingerprint: null,
          }
        : {
            id: nextId('cmpl'),
            object: 'text_completion',
            created,
            model: o.model,
            choices: [{ text, index: 0, logprobs: null, finish_reason: g.finishReason }],
            usage: usageOf(g),
            system_fingerprint: null,
          };
    settle(t, 'completed');
    sendJson(res, 200, JSON.stringify(body));
  }

  function generateNonStream(t: Tracker, res: ServerResponse, g: GenerationRequest, failing: boolean): void {
    if (failing) {
      fail(t, res, new RequestError(500, FAILURE_ERROR.message, FAILURE_ERROR.type, null, FAILURE_ERROR.code));
      return;
    }
    // Same wall-clock cost as the streamed form, so latency-based tests see consistent behaviour.
    const totalMs = o.ttftMs + (g.maxTokens > 1 ? (g.maxTokens - 1) * tokenIntervalMs : 0);
    after(t, res, totalMs, () => respondFull(t, res, g));
  }

  function generateStream(t: Tracker, res: ServerResponse, g: GenerationRequest, failing: boolean): void {
    const created = Math.floor(Date.now() / 1000);
    const id = nextId(g.kind === 'chat' ? 'chatcmpl' : 'cmpl');
    const object = g.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    const head = `data: {"id":"${id}","object":"${object}","created":${created},"model":${modelJson},"system_fingerprint":null,"choices":[`;
    const usageTail = g.includeUsage ? ',"usage":null' : '';
    // Per-token chunks are built by concatenation around the token text: no JSON.stringify on
    // the hot path. Token text is plain ASCII, so it needs no escaping.
    const tokenPrefix = g.kind === 'chat' ? `${head}{"index":0,"delta":{"content":"` : `${head}{"text":"`;
    const tokenSuffix =
      g.kind === 'chat'
        ? `"},"logprobs":null,"finish_reason":null}]${usageTail}}\n\n`
        : `","index":0,"logprobs":null,"finish_reason":null}]${usageTail}}\n\n`;
    const roleChunk = g.kind === 'chat' ? `${head}{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${usageTail}}\n\n` : '';
    const n = g.maxTokens;

    // No explicit `connection: keep-alive`: it would keep Node from sending its `Keep-Alive: timeout=` hint, and
    // clients would then hold the connection past the server's idle close.
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
    });
    // Clients (and the relay) learn the request was accepted before the first token arrives.
    res.flushHeaders();

    const firstTokenAt = performance.now() + o.ttftMs;
    let sent = 0;

    const endWithError = (out: string, err: { message: string; type: string; code: string }, outcome: Outcome): void => {
      settle(t, outcome);
      res.end(`${out}data: ${errorBody(err.message, err.type, err.code, null)}\n\n`);
    };

    const schedule = (now: number, wakeAt: number): void => {
      const at = t.deadlineAt !== undefined && t.deadlineAt < wakeAt ? t.deadlineAt : wakeAt;
      if (at <= now) t.immediate = setImmediate(step);
      else t.timer = setTimeout(step, at - now);
    };

    function step(): void {
      t.timer = undefined;
      t.immediate = undefined;
      if (t.settled) return;
      const now = performance.now();
      if (t.deadlineAt !== undefined && now >= t.deadlineAt) {
        endWithError('', DEADLINE_ERROR, 'aborted');
        return;
      }
      if (now < firstTokenAt) {
        schedule(now, firstTokenAt);
        return;
      }
      // Everything due since the first token goes out in one write; timers only fire for the
      // gaps, so high rates cost one timer per batch rather than one per token.
      let due = fast ? n : Math.min(n, 1 + Math.floor((now - firstTokenAt) / tokenIntervalMs));
      if (due - sent > MAX_TOKENS_PER_WRITE) due = sent + MAX_TOKENS_PER_WRITE;
      let out = sent === 0 ? roleChunk : '';
      if (failing) {
        endWithError(`${out}${tokenPrefix}${tokenText(0)}${tokenSuffix}`, FAILURE_ERROR, 'failed');
        return;
      }
      for (let i = sent; i < due; i++) out += tokenPrefix + tokenText(i) + tokenSuffix;
      sent = due;
      if (sent >= n) {
        out +=
          g.kind === 'chat'
            ? `${head}{"index":0,"delta":{},"logprobs":null,"finish_reason":"${g.finishReason}"}]${usageTail}}\n\n`
            : `${head}{"text":"","index":0,"logprobs":null,"finish_reason":"${g.finishReason}"}]${usageTail}}\n\n`;
        if (g.includeUsage) out += `${head}]${',"usage":'}${JSON.stringify(usageOf(g))}}\n\n`;
        out += 'data: [DONE]\n\n';
        settle(t, 'completed');
        res.end(out);
        return;
      }
      if (!res.write(out)) {
        // Resume on drain; if the socket dies instead, the close handler settles the request.
        res.once('drain', step);
        return;
      }
      schedule(now, fast ? now : firstTokenAt + sent * tokenIntervalMs);
    }

    schedule(performance.now(), firstTokenAt);
  }

  function embeddings(t: Tracker, res: ServerResponse, body: Record<string, unknown>, failing: boolean): void {
    const input = body.input;
    let inputs: string[];
    if (typeof input === 'string') inputs = [input];
    else if (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === 'string')) inputs = input as string[];
    else throw badRequest('input must be a string or a non-empty array of strings', 'input');
    const format = body.encoding_format;
    if (format !== undefined && format !== null && format !== 'float' && format !== 'base64') {
      throw badRequest('encoding_format must be "float" or "base64"', 'encoding_format');
    }
    if (failing) {
      fail(t, res, new RequestError(500, FAILURE_ERROR.message, FAILURE_ERROR.type, null, FAILURE_ERROR.code));
      return;
    }
    after(t, res, o.ttftMs, () => {
      let promptTokens = 0;
      const data = inputs.map((text, index) => {
        promptTokens += countWords(text);
        const vec = embeddingFor(text);
        // Official OpenAI SDKs request base64 by default, so both encodings must work.
        return { object: 'embedding', index, embedding: format === 'base64' ? embeddingBase64(vec) : vec };
      });
      settle(t, 'completed');
      sendJson(
        res,
        200,
        JSON.stringify({ object: 'list', data, model: o.model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }),
      );
    });
  }

  type BodyResult = { kind: 'ok'; text: string } | { kind: 'too-large' } | { kind: 'aborted' };

  function readBody(req: IncomingMessage): Promise<BodyResult> {
    return new Promise((resolve) => {
      const declared = Number(req.headers['content-length']);
      let tooLarge = Number.isFinite(declared) && declared > MAX_BODY_BYTES;
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_BODY_BYTES) tooLarge = true;
        if (tooLarge) {
          chunks.length = 0;
          // Draining lets the client finish uploading and then read the 413 instead of a reset.
          if (size > MAX_DISCARD_BYTES) req.destroy();
          return;
        }
        chunks.push(chunk);
      });
      req.on('end', () => {
        resolve(tooLarge ? { kind: 'too-large' } : { kind: 'ok', text: Buffer.concat(chunks, size).toString('utf8') });
      });
      req.on('close', () => resolve({ kind: 'aborted' }));
    });
  }

  async function inference(req: IncomingMessage, res: ServerResponse, route: 'chat' | 'completions' | 'embeddings'): Promise<void> {
    const t: Tracker = { settled: false, deadlineAt: undefined, timer: undefined, immediate: undefined };
    stats.requests++;
    stats.active++;
    // Registered before anything async so a disconnect at any stage is seen as an abort.
    res.on('close', () => {
      if (!t.settled) settle(t, 'aborted');
    });

    stats.lastIdempotencyKey = headerValue(req, 'idempotency-key') ?? null;
    const rawDeadline = headerValue(req, 'x-lunanexa-deadline');
    let deadlineEpochMs: number | null = null;
    if (rawDeadline !== undefined) {
      deadlineEpochMs = parseDeadline(rawDeadline);
      stats.lastDeadline = deadlineEpochMs === null ? rawDeadline : new Date(deadlineEpochMs).toISOString();
    } else {
      stats.lastDeadline = null;
    }

    if (isLoading()) {
      fail(t, res, new RequestError(503, 'model is loading', 'server_error', null, 'model_loading'), { 'retry-after': '1' });
      return;
    }
    if (rawDeadline !== undefined) {
      if (deadlineEpochMs === null) {
        fail(t, res, badRequest('X-LunaNexa-Deadline must be an ISO-8601 time or epoch milliseconds', null));
        return;
      }
      const remaining = deadlineEpochMs - Date.now();
      if (remaining <= 0) {
        fail(t, res, new RequestError(504, DEADLINE_ERROR.message, DEADLINE_ERROR.type, null, DEADLINE_ERROR.code));
        return;
      }
      t.deadlineAt = performance.now() + remaining;
    }

    const result = await readBody(req);
    if (t.settled) return;
    if (result.kind === 'aborted') {
      settle(t, 'aborted');
      return;
    }
    if (result.kind === 'too-large') {
      fail(t, res, new RequestError(413, `request body exceeds ${MAX_BODY_BYTES} bytes`, 'invalid_request_error', null, 'request_too_large'));
      return;
    }
    let body: unknown;
    try {
      body = JSON.parse(result.text);
    } catch {
      fail(t, res, badRequest('request body is not valid JSON', null));
      return;
    }
    try {
      if (!isRecord(body)) throw badRequest('request body must be a JSON object', null);
      const model = body.model;
      if (model !== undefined && model !== null) {
        if (typeof model !== 'string') throw badRequest('model must be a string', 'model');
        if (model !== o.model) {
          throw new RequestError(404, `The model \`${model}\` does not exist.`, 'invalid_request_error', 'model', 'model_not_found');
        }
      }
      if (route === 'embeddings') {
        embeddings(t, res, body, o.failureRate > 0 && random() < o.failureRate);
        return;
      }
      const g = route === 'chat' ? parseChat(body) : parseCompletion(body);
      // Drawn only for valid requests so a seeded run's fault pattern ignores rejected input.
      const failing = o.failureRate > 0 && random() < o.failureRate;
      if (g.stream) generateStream(t, res, g, failing);
      else generateNonStream(t, res, g, failing);
    } catch (err) {
      fail(t, res, err instanceof RequestError ? err : new RequestError(500, 'internal simulator error', 'server_error', null, 'internal_error'));
    }
  }

  function handle(req: IncomingMessage, res: ServerResponse): void {
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
        if (isLoading()) sendJson(res, 503, JSON.stringify({ status: 'loading' }), { 'retry-after': '1' });
        else sendJson(res, 200, JSON.stringify({ status: 'ok', model: o.model, instanceId, memoryMiB: o.memoryMiB }));
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
        sendJson(res, 200, JSON.stringify(stats));
        return;
      default:
        inference(req, res, entry.route).catch(() => {
          // Unreachable by design; still, a bug here must not take the process down.
          sendJson(res, 500, errorBody('internal simulator error', 'server_error', 'internal_error', null));
        });
    }
  }

  const server = createServer((req, res) => {
    // An upload reset by the client surfaces as an 'error' on req; it is handled via 'close'.
    req.on('error', () => {});
    res.on('error', () => {});
    try {
      handle(req, res);
    } catch {
      sendJson(res, 500, errorBody('internal simulator error', 'server_error', 'internal_error', null));
    }
  });

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => reject(err);
    server.once('error', onError);
    server.listen(o.port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', () => {});

  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : o.port;
  if (instanceId === '') instanceId = `sim-${process.pid}-${port}`;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closing: Promise<void> | undefined;
  return {
    port,
    url: `http://${urlHost}:${port}`,
    stats: () => ({ ...stats }),
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

function invokedAsScript(): boolean {
  const entry = process.argv[1];
  // The name check keeps a bundle that inlines this module from starting a server on load.
  if (entry === undefined || !/\/sim-server\.(ts|js|mjs)$/.test(import.meta.url)) return false;
  try {
    return pathToFileURL(realpathSync(entry)).href === import.meta.url;
  } catch {
    return false;
  }
}

if (invokedAsScript()) {
  runSimServerCli(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
  });
}
