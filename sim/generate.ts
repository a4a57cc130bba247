import type { ServerResponse } from 'node:http';
import { streamChunks, generatedText, usageOf } from './chunks.js';
import { DEADLINE_ERROR, FAILURE_ERROR, errorBody, simulatedFailure } from './errors.js';
import { sendJson } from './http.js';
import type { Ledger, Outcome, Tracker } from './ledger.js';
import type { GenerationRequest } from './requests.js';

// Bounds the work per write so aborts, deadlines and other connections get a turn.
const MAX_TOKENS_PER_WRITE = 1024;

/** What generation needs of the simulated model: its name, its pace, and fresh response ids. */
export interface SimModel {
  name: string;
  /** The name as a JSON string, spliced into streamed chunks. */
  json: string;
  ttftMs: number;
  /** No pacing: every token is due at once. */
  fast: boolean;
  tokenIntervalMs: number;
  nextId(prefix: string): string;
}

function respondFull(model: SimModel, ledger: Ledger, t: Tracker, res: ServerResponse, g: GenerationRequest): void {
  const created = Math.floor(Date.now() / 1000);
  const text = generatedText(g.maxTokens);
  const body =
    g.kind === 'chat'
      ? {
          id: model.nextId('chatcmpl'),
          object: 'chat.completion',
          created,
          model: model.name,
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
          id: model.nextId('cmpl'),
          object: 'text_completion',
          created,
          model: model.name,
          choices: [{ text, index: 0, logprobs: null, finish_reason: g.finishReason }],
          usage: usageOf(g),
          system_fingerprint: null,
        };
  ledger.settle(t, 'completed');
  sendJson(res, 200, JSON.stringify(body));
}

export function generateNonStream(model: SimModel, ledger: Ledger, t: Tracker, res: ServerResponse, g: GenerationRequest, failing: boolean): void {
  if (failing) {
    ledger.fail(t, res, simulatedFailure());
    return;
  }
  // Same wall-clock cost as the streamed form, so latency-based tests see consistent behaviour.
  const totalMs = model.ttftMs + (g.maxTokens > 1 ? (g.maxTokens - 1) * model.tokenIntervalMs : 0);
  ledger.after(t, res, totalMs, () => respondFull(model, ledger, t, res, g));
}

export function generateStream(model: SimModel, ledger: Ledger, t: Tracker, res: ServerResponse, g: GenerationRequest, failing: boolean): void {
  const chunks = streamChunks(g, model.nextId(g.kind === 'chat' ? 'chatcmpl' : 'cmpl'), Math.floor(Date.now() / 1000), model.json);
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

  const firstTokenAt = performance.now() + model.ttftMs;
  let sent = 0;

  const endWithError = (out: string, err: { message: string; type: string; code: string }, outcome: Outcome): void => {
    ledger.settle(t, outcome);
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
    let due = model.fast ? n : Math.min(n, 1 + Math.floor((now - firstTokenAt) / model.tokenIntervalMs));
    if (due - sent > MAX_TOKENS_PER_WRITE) due = sent + MAX_TOKENS_PER_WRITE;
    let out = sent === 0 ? chunks.role : '';
    if (failing) {
      endWithError(`${out}${chunks.token(0)}`, FAILURE_ERROR, 'failed');
      return;
    }
    for (let i = sent; i < due; i++) out += chunks.token(i);
    ledger.streamed(due - sent);
    sent = due;
    if (sent >= n) {
      ledger.settle(t, 'completed');
      res.end(out + chunks.end());
      return;
    }
    if (!res.write(out)) {
      // Resume on drain; if the socket dies instead, the close handler settles the request.
      res.once('drain', step);
      return;
    }
    schedule(now, model.fast ? now : firstTokenAt + sent * model.tokenIntervalMs);
  }

  schedule(performance.now(), firstTokenAt);
}
