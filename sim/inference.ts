import type { IncomingMessage, ServerResponse } from 'node:http';
import { embeddingBase64, embeddingFor } from './embeddings.js';
import { DEADLINE_ERROR, RequestError, badRequest, simulatedFailure } from './errors.js';
import { generateNonStream, generateStream, type Generation } from './generate.js';
import { MAX_BODY_BYTES, headerValue, readBody, sendJson } from './http.js';
import type { Tracker } from './ledger.js';
import type { SimStats } from './options.js';
import { countWords, isRecord, parseChat, parseCompletion, parseDeadline, parseEmbeddings } from './requests.js';

export type InferenceRoute = 'chat' | 'completions' | 'embeddings';

/** What inference needs of the simulator beyond generation: its counters, its faults and whether it still loads. */
export interface InferenceDeps extends Generation {
  stats: SimStats;
  isLoading(): boolean;
  /** Draws whether an accepted request fails (the failure rate). */
  failing(): boolean;
}

function embeddings(deps: InferenceDeps, t: Tracker, res: ServerResponse, body: Record<string, unknown>, failing: boolean): void {
  const { inputs, format } = parseEmbeddings(body);
  if (failing) {
    deps.ledger.fail(t, res, simulatedFailure());
    return;
  }
  deps.ledger.after(t, res, deps.model.ttftMs, () => {
    let promptTokens = 0;
    const data = inputs.map((text, index) => {
      promptTokens += countWords(text);
      const vec = embeddingFor(text);
      // Official OpenAI SDKs request base64 by default, so both encodings must work.
      return { object: 'embedding', index, embedding: format === 'base64' ? embeddingBase64(vec) : vec };
    });
    deps.ledger.settle(t, 'completed');
    sendJson(res, 200, JSON.stringify({ object: 'list', data, model: deps.model.name, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }));
  });
}

/**
 * Records the request's idempotency key and deadline, and refuses it while loading or past its deadline.
 * Returns false when the request was answered already.
 */
function admit(deps: InferenceDeps, t: Tracker, req: IncomingMessage, res: ServerResponse): boolean {
  const { stats, ledger } = deps;
  stats.lastIdempotencyKey = headerValue(req, 'idempotency-key') ?? null;
  const rawDeadline = headerValue(req, 'x-lunanexa-deadline');
  let deadlineEpochMs: number | null = null;
  if (rawDeadline !== undefined) {
    deadlineEpochMs = parseDeadline(rawDeadline);
    stats.lastDeadline = deadlineEpochMs === null ? rawDeadline : new Date(deadlineEpochMs).toISOString();
  } else {
    stats.lastDeadline = null;
  }

  if (deps.isLoading()) {
    ledger.fail(t, res, new RequestError(503, 'model is loading', 'server_error', null, 'model_loading'), { 'retry-after': '1' });
    return false;
  }
  if (rawDeadline === undefined) return true;
  if (deadlineEpochMs === null) {
    ledger.fail(t, res, badRequest('X-LunaNexa-Deadline must be an ISO-8601 time or epoch milliseconds', null));
    return false;
  }
  const remaining = deadlineEpochMs - Date.now();
  if (remaining <= 0) {
    ledger.fail(t, res, new RequestError(504, DEADLINE_ERROR.message, DEADLINE_ERROR.type, null, DEADLINE_ERROR.code));
    return false;
  }
  t.deadlineAt = performance.now() + remaining;
  return true;
}

/** Reads the JSON body; undefined when the request was answered (or aborted) instead. */
async function readJson(deps: InferenceDeps, t: Tracker, req: IncomingMessage, res: ServerResponse): Promise<{ body: unknown } | undefined> {
  const result = await readBody(req);
  if (t.settled) return undefined;
  if (result.kind === 'aborted') {
    deps.ledger.settle(t, 'aborted');
    return undefined;
  }
  if (result.kind === 'too-large') {
    deps.ledger.fail(t, res, new RequestError(413, `request body exceeds ${MAX_BODY_BYTES} bytes`, 'invalid_request_error', null, 'request_too_large'));
    return undefined;
  }
  try {
    return { body: JSON.parse(result.text) as unknown };
  } catch {
    deps.ledger.fail(t, res, badRequest('request body is not valid JSON', null));
    return undefined;
  }
}

function answer(deps: InferenceDeps, t: Tracker, res: ServerResponse, route: InferenceRoute, body: unknown): void {
  if (!isRecord(body)) throw badRequest('request body must be a JSON object', null);
  const model = body.model;
  if (model !== undefined && model !== null) {
    if (typeof model !== 'string') throw badRequest('model must be a string', 'model');
    if (model !== deps.model.name) {
      throw new RequestError(404, `The model \`${model}\` does not exist.`, 'invalid_request_error', 'model', 'model_not_found');
    }
  }
  if (route === 'embeddings') {
    embeddings(deps, t, res, body, deps.failing());
    return;
  }
  const g = route === 'chat' ? parseChat(body) : parseCompletion(body);
  // Drawn only for valid requests so a seeded run's fault pattern ignores rejected input.
  const failing = deps.failing();
  if (g.stream) generateStream(deps, t, res, g, failing);
  else generateNonStream(deps, t, res, g, failing);
}

/** One chat, completions or embeddings request, from its headers to its settled outcome. */
export async function inference(deps: InferenceDeps, req: IncomingMessage, res: ServerResponse, route: InferenceRoute): Promise<void> {
  // Opened before anything async so a disconnect at any stage is seen as an abort.
  const t = deps.ledger.open(res);
  if (!admit(deps, t, req, res)) return;
  const read = await readJson(deps, t, req, res);
  if (!read) return;
  try {
    answer(deps, t, res, route, read.body);
  } catch (err) {
    deps.ledger.fail(t, res, err instanceof RequestError ? err : new RequestError(500, 'internal simulator error', 'server_error', null, 'internal_error'));
  }
}
