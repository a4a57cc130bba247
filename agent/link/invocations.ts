import type { Readable } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { request, type Dispatcher } from 'undici';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { FramesAccepted } from '../../shared/contracts/relay.js';
import type { RuntimeResponse } from '../runtimes/adapter.js';
import { IDLE, type RuntimeLoad } from '../supervisor/plan.js';
import { WARM_WINDOW_MS } from '../supervisor/report.js';
import type { InvokeTarget } from '../supervisor/supervisor.js';
import { fromRequest, readResult, type SignedClient } from './http.js';

/** Largest frame: bytes beyond it start the next frame. */
const BATCH_BYTES = 32 * 1024;

/** Resolves after pending I/O callbacks ran: whatever the runtime already sent has been read by then. */
const afterIo = () => new Promise<null>((resolve) => setImmediate(() => resolve(null)));

export interface InvocationRunnerOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedHeaders: SignedClient['signedHeaders'];
  /** The runtime an invocation goes to, or why none takes it. */
  runtime: (assignmentId: string) => InvokeTarget;
  /** A runtime's queued or active count went from 0 or to 0: worth a report. */
  onLoadChange: (assignmentId: string) => void;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/** The invocations in flight on one runtime. */
interface Tally {
  queued: number;
  active: number;
  lastServedAt: number | null;
  deadlines: Map<string, number>;
}

/** Counts generated tokens in OpenAI SSE bytes without parsing them: one `data:` event per token chunk. */
function countEvents(text: string): number {
  let count = 0;
  for (let at = text.indexOf('data: '); at !== -1; at = text.indexOf('data: ', at + 6)) count += 1;
  return count;
}

/** Cuts text into pieces of at most BATCH_BYTES UTF-16 units, never between the halves of a surrogate pair. */
function* pieces(text: string): Generator<string> {
  for (let at = 0; at < text.length; ) {
    let end = Math.min(text.length, at + BATCH_BYTES);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end -= 1;
    yield text.slice(at, end);
    at = end;
  }
}

/**
 * Runs invocations sent on the stream: calls the runtime through its adapter and streams the response back as
 * NDJSON frames on one upload per invocation (resumable by offset), honouring cancel and the deadline.
 * Node streams and `undici.request` throughout: the web-stream layer of `fetch` cost more than the relay's
 * own work on this path.
 */
export function createInvocationRunner(opts: InvocationRunnerOptions) {
  const running = new Map<string, AbortController>();
  const tallies = new Map<string, Tally>();

  function tallyOf(assignmentId: string): Tally {
    let tally = tallies.get(assignmentId);
    if (tally) return tally;
    // A runtime served for the first time: the idle tallies that went cold meanwhile say nothing any more
    // (their runtimes were retired, or report cold either way), so retired assignments do not pile up.
    const now = Date.now();
    for (const [id, t] of tallies) if (t.queued + t.active === 0 && (t.lastServedAt === null || now - t.lastServedAt >= WARM_WINDOW_MS)) tallies.delete(id);
    tallies.set(assignmentId, (tally = { queued: 0, active: 0, lastServedAt: null, deadlines: new Map() }));
    return tally;
  }

  function adjust(assignmentId: string, tally: Tally, queued: number, active: number) {
    const before = [tally.queued > 0, tally.active > 0];
    tally.queued += queued;
    tally.active += active;
    if (before[0] !== tally.queued > 0 || before[1] !== tally.active > 0) opts.onLoadChange(assignmentId);
  }

  /**
   * Counts one invocation on its runtime: queued until the runtime's response head arrives, active while the
   * answer streams. Counted in the same turn the runtime was chosen, so a drain starting next sees it.
   */
  function track(invoke: Invoke) {
    const tally = tallyOf(invoke.assignmentId);
    let phase: 'queued' | 'active' | 'done' = 'queued';
    tally.deadlines.set(invoke.invocationId, invoke.deadline);
    adjust(invoke.assignmentId, tally, 1, 0);
    return {
      answered() {
        if (phase !== 'queued') return;
        phase = 'active';
        adjust(invoke.assignmentId, tally, -1, 1);
      },
      done() {
        if (phase === 'done') return;
        if (phase === 'active') tally.lastServedAt = Date.now();
        tally.deadlines.delete(invoke.invocationId);
        adjust(invoke.assignmentId, tally, phase === 'queued' ? -1 : 0, phase === 'active' ? -1 : 0);
        phase = 'done';
      },
    };
  }

  const post = async (path: string, body: string | AsyncIterable<string>) =>
    fromRequest(
      await request(new URL(path, opts.baseUrl), {
        method: 'POST',
        headers: await opts.signedHeaders('POST', path, '', { 'content-type': 'application/x-ndjson' }),
        // undici writes an async iterable chunk by chunk (chunked encoding); its typings only name Readable.
        body: body as string | Readable,
        dispatcher: opts.dispatcher,
      }),
    );

  async function upload(invocationId: string, frames: AsyncIterable<Frame>): Promise<void> {
    const path = `/agent/v1/invocations/${encodeURIComponent(invocationId)}/frames`;
    const iterator = frames[Symbol.asyncIterator]();
    const sent: Frame[] = [];
    const line = (frame: Frame) => {
      sent.push(frame);
      return `${JSON.stringify(frame)}\n`;
    };
    async function* body(): AsyncGenerator<string> {
      // An empty line (skipped by the control plane) opens the upload at once: its start is the node's ack of
      // the invoke, which matters when the runtime answers only at the end (a request that is not streamed).
      yield '\n';
      let next = iterator.next();
      for (;;) {
        const first = await next;
        if (first.done) return;
        let text = line(first.value);
        next = iterator.next();
        // Frames produced meanwhile (the head and the first bytes, the last bytes and the end) go out with it:
        // one write on each side instead of one per frame. Only what has already arrived is waited for.
        while (text.length < BATCH_BYTES) {
          const more = await Promise.race([next, afterIo()]);
          if (more === null) break;
          if (more.done) {
            yield text;
            return;
          }
          text += line(more.value);
          next = iterator.next();
        }
        yield text;
      }
    }
    const first = await post(path, body()).then(
      (response) => readResult(response, FramesAccepted),
      (error: unknown) => ({ success: false as const, status: 0, error: { code: 'network_error', message: String(error) } }),
    );
    if (first.success) return;
    if (first.status !== 0) throw new Error(`${first.error.code}: ${first.error.message}`);
    // The upload broke: drain what is left, ask where the control plane stopped, resend from there.
    for (;;) {
      const next = await iterator.next();
      if (next.done) break;
      sent.push(next.value);
    }
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const at = await request(new URL(path, opts.baseUrl), { headers: await opts.signedHeaders('GET', path, ''), dispatcher: opts.dispatcher })
        .then((r) => readResult(fromRequest(r), FramesAccepted))
        .catch(() => null);
      if (!at?.success) continue;
      const rest = sent.filter((frame) => frame.o >= at.data.nextOffset).map((frame) => `${JSON.stringify(frame)}\n`).join('');
      const resent = await post(path, rest)
        .then((r) => readResult(r, FramesAccepted))
        .catch(() => null);
      if (resent?.success) return;
    }
    throw new Error('frames upload failed after resuming');
  }

  type Call = { ok: true; response: RuntimeResponse } | { ok: false; code: string; message: string };

  /**
   * Starts the runtime call at once, so it overlaps with opening the frames upload. A runtime that takes no
   * invocation (draining, not ready) is answered with an error frame before any head: the relay retries that on
   * another replica.
   */
  async function callRuntime(invoke: Invoke, target: InvokeTarget, signal: AbortSignal, answered: () => void): Promise<Call> {
    if (!target.ok) return { ok: false, code: target.code, message: target.message };
    try {
      const response = await target.adapter.invoke(target.handle, invoke.path, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-lunanexa-deadline': new Date(invoke.deadline).toISOString(),
          ...(invoke.idempotencyKey ? { 'idempotency-key': invoke.idempotencyKey } : {}),
        },
        body: invoke.body,
        signal,
      });
      answered();
      return { ok: true, response };
    } catch {
      return signal.aborted
        ? { ok: false, code: abortCode(signal), message: String(signal.reason) }
        : { ok: false, code: 'runtime_unreachable', message: 'the runtime did not answer' };
    }
  }

  async function* produce(invoke: Invoke, signal: AbortSignal, calling: Promise<Call>): AsyncGenerator<Frame> {
    let offset = 0;
    const call = await calling;
    if (!call.ok) {
      yield { o: offset++, t: 'error', code: call.code, message: call.message };
      return;
    }
    const response = call.response;
    yield { o: offset++, t: 'head', status: response.status, contentType: response.contentType ?? 'application/json' };
    let tokens = 0;
    let tail = '';
    try {
      // undici's body ignores setEncoding: decode here, keeping characters split across reads whole.
      const decoder = new StringDecoder('utf8');
      // A Readable's iterator hands over everything buffered at once: batches form under load by themselves,
      // and the first token never waits for a timer.
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        const text = decoder.write(chunk);
        if (!text) continue;
        if (invoke.stream) {
          tokens += countEvents(text);
          tail = (tail + text).slice(-1024);
        }
        for (const d of pieces(text)) yield { o: offset++, t: 'data', d };
      }
    } catch {
      yield { o: offset++, t: 'error', code: signal.aborted ? abortCode(signal) : 'runtime_stream_broken', message: signal.aborted ? String(signal.reason) : 'the runtime stream broke' };
      return;
    }
    const ok = response.status >= 200 && response.status < 300;
    // A stream the runtime ended without `[DONE]` (an error event, or a crash) is a failure, however
    // politely the connection closed: the client must not take it for a complete answer.
    if (invoke.stream && ok && !tail.includes('data: [DONE]')) {
      // If the runtime's last event was an error, the client has it already: only the failure is recorded.
      const told = tail.slice(tail.lastIndexOf('data: ')).startsWith('data: {"error"');
      // The runtime stops at the deadline too (it got it as X-LunaNexa-Deadline): say which it was.
      if (signal.aborted || Date.now() >= invoke.deadline) {
        yield { o: offset++, t: 'error', code: signal.aborted ? abortCode(signal) : 'deadline_exceeded', message: 'the deadline passed during generation', told };
      } else {
        yield { o: offset++, t: 'error', code: 'runtime_stream_incomplete', message: 'the runtime ended the stream without [DONE]', told };
      }
      return;
    }
    // `[DONE]` is an event too but not a token.
    yield { o: offset++, t: 'end', tokens: invoke.stream ? Math.max(0, tokens - 1) : 0 };
  }

  function abortCode(signal: AbortSignal): string {
    return signal.reason === 'deadline_exceeded' ? 'deadline_exceeded' : 'cancelled';
  }

  return {
    run(invoke: Invoke): void {
      const controller = new AbortController();
      running.set(invoke.invocationId, controller);
      const timer = setTimeout(() => controller.abort('deadline_exceeded'), Math.max(0, invoke.deadline - Date.now()));
      const target = opts.runtime(invoke.assignmentId);
      const tracked = target.ok ? track(invoke) : null;
      const calling = callRuntime(invoke, target, controller.signal, () => tracked?.answered());
      // The runtime call is the critical path: its request reaches the socket before the upload is signed and
      // opened (the upload only has to be open by the time the runtime answers).
      const uploading = afterIo().then(() => upload(invoke.invocationId, produce(invoke, controller.signal, calling)));
      void uploading
        .catch((error: unknown) => {
          // The control plane no longer wants these frames (cancelled, finished elsewhere): stop the runtime call.
          controller.abort('upload_refused');
          opts.log('frames upload failed', { invocationId: invoke.invocationId, error: error instanceof Error ? error.message : String(error) });
        })
        .finally(() => {
          clearTimeout(timer);
          running.delete(invoke.invocationId);
          // The upload settled: the runtime's answer was relayed to its end, or the call was aborted.
          tracked?.done();
        });
    },
    cancel(invocationId: string, reason: string): void {
      running.get(invocationId)?.abort(reason);
    },
    /** Aborts every invocation in flight (their stream is gone, and with it whoever waited for them). */
    abortAll(reason: string): void {
      for (const controller of running.values()) controller.abort(reason);
    },
    active(): number {
      return running.size;
    },
    /** The invocations in flight on one runtime, for its report and its drain. */
    load(assignmentId: string): RuntimeLoad {
      const tally = tallies.get(assignmentId);
      if (!tally) return IDLE;
      return {
        queued: tally.queued,
        active: tally.active,
        lastServedAt: tally.lastServedAt,
        latestDeadline: tally.deadlines.size > 0 ? Math.max(...tally.deadlines.values()) : null,
      };
    },
  };
}
export type InvocationRunner = ReturnType<typeof createInvocationRunner>;
