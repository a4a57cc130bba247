import type { ServerResponse } from 'node:http';
import { streamChunks, generatedText, usageOf } from './chunks.js';
import { DEADLINE_ERROR, FAILURE_ERROR, errorBody, simulatedFailure } from './errors.js';
import { sendJson } from './http.js';
import type { Ledger, Outcome, Tracker } from './ledger.js';
import type { Metrics } from './metrics.js';
import type { GenerationRequest } from './requests.js';
import type { Scheduler, Sequence } from './scheduler.js';

// Bounds the work per write so aborts, deadlines and other connections get a turn.
const MAX_TOKENS_PER_WRITE = 1024;

/** The simulated model's name and fresh response ids; its pace is the scheduler's. */
export interface SimModel {
  name: string;
  /** The name as a JSON string, spliced into streamed chunks. */
  json: string;
  /** What embeddings take to answer; a generation's first token is the scheduler's to time. */
  ttftMs: number;
  nextId(prefix: string): string;
}

/** What a generation needs of the simulator. */
export interface Generation {
  model: SimModel;
  ledger: Ledger;
  scheduler: Scheduler;
  metrics: Metrics;
}

// One pending wake-up per request: a scheduler's wake must not start a second chain of steps beside its timer.
function cancelWake(t: Tracker): void {
  if (t.timer !== undefined) clearTimeout(t.timer);
  if (t.immediate !== undefined) clearImmediate(t.immediate);
  t.timer = undefined;
  t.immediate = undefined;
}

/** Wakes `step` at `wakeAt`, or at the request's deadline when that comes first, instead of any earlier wake-up. */
function scheduleStep(t: Tracker, step: () => void, now: number, wakeAt: number): void {
  cancelWake(t);
  const at = t.deadlineAt !== undefined && t.deadlineAt < wakeAt ? t.deadlineAt : wakeAt;
  if (at <= now) t.immediate = setImmediate(step);
  else t.timer = setTimeout(step, at - now);
}

/**
 * Enters the request's sequence into the scheduler, `step` to run when it starts and whenever its rate changes
 * (unless `paused`: a stream waiting for its socket to drain resumes on its own). A queued request still ends at its
 * deadline.
 */
function enter(gen: Generation, t: Tracker, step: () => void, paused: () => boolean = () => false): Sequence {
  const seq = gen.scheduler.sequence(() => {
    if (t.settled || paused()) return;
    cancelWake(t);
    t.immediate = setImmediate(step);
  });
  t.release = () => gen.scheduler.leave(seq);
  gen.scheduler.join(seq);
  if (seq.firstTokenAt === undefined && t.deadlineAt !== undefined) scheduleStep(t, step, performance.now(), t.deadlineAt);
  return seq;
}

/**
 * Where a step finds its request: past its deadline, waiting (queued, or prefilling until its first token; the next
 * wake-up set), or generating.
 */
function phaseOf(t: Tracker, seq: Sequence, step: () => void, now: number): 'settled' | 'deadline' | 'wait' | 'go' {
  // A step runs from its timer: the timer is spent, and a request that ended meanwhile takes no more steps.
  t.timer = undefined;
  t.immediate = undefined;
  if (t.settled) return 'settled';
  if (t.deadlineAt !== undefined && now >= t.deadlineAt) return 'deadline';
  if (seq.firstTokenAt === undefined) {
    // Only a deadline timer (which may fire a little early) wakes a queued request; the scheduler wakes it to start.
    if (t.deadlineAt !== undefined) scheduleStep(t, step, now, t.deadlineAt);
    return 'wait';
  }
  if (now < seq.firstTokenAt) {
    scheduleStep(t, step, now, seq.firstTokenAt);
    return 'wait';
  }
  return 'go';
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

export function generateNonStream(gen: Generation, t: Tracker, res: ServerResponse, g: GenerationRequest, failing: boolean): void {
  const { ledger, scheduler, metrics } = gen;
  if (failing) {
    ledger.fail(t, res, simulatedFailure());
    return;
  }
  let first = true;
  // Paced as the streamed form, so latency-based tests see consistent behaviour.
  const step = (): void => {
    const now = performance.now();
    const phase = phaseOf(t, seq, step, now);
    if (phase === 'deadline') {
      ledger.settle(t, 'aborted');
      sendJson(res, 504, errorBody(DEADLINE_ERROR.message, DEADLINE_ERROR.type, DEADLINE_ERROR.code, null));
      return;
    }
    if (phase !== 'go') return;
    if (first) {
      first = false;
      metrics.firstToken(now - seq.arrivedAt, g.promptTokens);
    }
    const doneAt = scheduler.dueAt(seq, g.maxTokens);
    if (now < doneAt) {
      scheduleStep(t, step, now, doneAt);
      return;
    }
    metrics.generated(g.maxTokens);
    respondFull(gen.model, ledger, t, res, g);
  };
  const seq = enter(gen, t, step);
}

export function generateStream(gen: Generation, t: Tracker, res: ServerResponse, g: GenerationRequest, failing: boolean): void {
  const { ledger, scheduler, metrics } = gen;
  const chunks = streamChunks(g, gen.model.nextId(g.kind === 'chat' ? 'chatcmpl' : 'cmpl'), Math.floor(Date.now() / 1000), gen.model.json);
  const n = g.maxTokens;

  // No explicit `connection: keep-alive`: it would keep Node from sending its `Keep-Alive: timeout=` hint, and
  // clients would then hold the connection past the server's idle close.
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
  });
  // Clients (and the relay) learn the request was accepted before the first token arrives, queued or not.
  res.flushHeaders();

  let sent = 0;
  let draining = false;

  const endWithError = (out: string, err: { message: string; type: string; code: string }, outcome: Outcome): void => {
    ledger.settle(t, outcome);
    res.end(`${out}data: ${errorBody(err.message, err.type, err.code, null)}\n\n`);
  };

  function step(): void {
    const now = performance.now();
    const phase = phaseOf(t, seq, step, now);
    if (phase === 'deadline') {
      endWithError('', DEADLINE_ERROR, 'aborted');
      return;
    }
    if (phase !== 'go') return;
    // Everything due since the first token goes out in one write; timers only fire for the
    // gaps, so high rates cost one timer per batch rather than one per token.
    let due = scheduler.due(seq, now, n);
    if (due - sent > MAX_TOKENS_PER_WRITE) due = sent + MAX_TOKENS_PER_WRITE;
    let out = sent === 0 ? chunks.role : '';
    if (failing) {
      endWithError(`${out}${chunks.token(0)}`, FAILURE_ERROR, 'failed');
      return;
    }
    if (sent === 0) metrics.firstToken(now - seq.arrivedAt, g.promptTokens);
    for (let i = sent; i < due; i++) out += chunks.token(i);
    ledger.streamed(due - sent);
    metrics.generated(due - sent);
    sent = due;
    if (sent >= n) {
      ledger.settle(t, 'completed');
      res.end(out + chunks.end());
      return;
    }
    if (!res.write(out)) {
      // Resume on drain; if the socket dies instead, the close handler settles the request.
      draining = true;
      res.once('drain', () => {
        draining = false;
        step();
      });
      return;
    }
    scheduleStep(t, step, now, scheduler.dueAt(seq, sent + 1));
  }

  const seq = enter(gen, t, step, () => draining);
}
