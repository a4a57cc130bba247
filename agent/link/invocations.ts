import type { Readable } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { FramesAccepted } from '../../shared/contracts/relay.js';
import { DATA_PIECE_BYTES, encodeFrame } from '../../shared/frame-codec.js';
import type { RuntimeResponse } from '../runtimes/adapter.js';
import { IDLE, type RuntimeLoad } from '../supervisor/plan.js';
import { WARM_WINDOW_MS } from '../supervisor/report.js';
import type { InvokeTarget } from '../supervisor/supervisor.js';
import { fromRequest, readResult, type SignedClient } from './http.js';
import type { Uplink } from './uplink.js';
import { ByteTail, NO_USAGE, parseUsage } from './answer-tail.js';

/** Resolves after pending I/O callbacks ran: whatever the runtime already sent has been read by then. */
const afterIo = () => new Promise<null>((resolve) => setImmediate(() => resolve(null)));
const DATA_EVENT = Buffer.from('data: ');
const DONE_EVENT = 'data: [DONE]';

export interface InvocationRunnerOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedHeaders: SignedClient['signedHeaders'];
  /** The machine's uplink: invocations use it while it is confirmed, the per-invocation upload otherwise. */
  uplink: Uplink;
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
function countEvents(bytes: Buffer): number {
  let count = 0;
  for (let at = bytes.indexOf(DATA_EVENT); at !== -1; at = bytes.indexOf(DATA_EVENT, at + DATA_EVENT.length)) count += 1;
  return count;
}

/**
 * Runs invocations sent on the stream: calls the runtime through its adapter and sends the response back as
 * binary frames (`shared/frame-codec.ts`) on the machine's uplink, or on one upload per invocation when no uplink
 * is confirmed (both resumable by offset), honouring cancel and the deadline.
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

  const post = async (path: string, body: Uint8Array | AsyncIterable<Uint8Array>) =>
    fromRequest(
      await request(new URL(path, opts.baseUrl), {
        method: 'POST',
        headers: await opts.signedHeaders('POST', path, '', { 'content-type': 'application/octet-stream' }),
        // undici writes an async iterable chunk by chunk (chunked encoding); its typings only name Readable.
        body: body as Uint8Array | Readable,
        dispatcher: opts.dispatcher,
      }),
    );

  /** Sends an invocation's frames up the uplink, as they come, under its backpressure. */
  async function viaUplink(invocationId: string, frames: AsyncIterable<Frame>): Promise<void> {
    for await (const frame of frames) await opts.uplink.send(invocationId, frame);
  }

  /** Sends an invocation's frames on an upload of its own; resumes once from where the control plane stopped. */
  async function upload(invocationId: string, frames: AsyncIterable<Frame>): Promise<void> {
    const path = `/agent/v1/invocations/${encodeURIComponent(invocationId)}/frames`;
    const iterator = frames[Symbol.asyncIterator]();
    const sent: Array<{ o: number; bytes: Uint8Array }> = [];
    const encoded = (frame: Frame) => {
      const bytes = encodeFrame(invocationId, frame);
      sent.push({ o: frame.o, bytes });
      return bytes;
    };
    async function* body(): AsyncGenerator<Uint8Array> {
      let next = iterator.next();
      for (;;) {
        const first = await next;
        if (first.done) return;
        const batch = [encoded(first.value)];
        let size = batch[0]!.length;
        next = iterator.next();
        // Frames produced meanwhile (the head and the first bytes, the last bytes and the end) go out with it:
        // one write on each side instead of one per frame. Only what has already arrived is waited for.
        while (size < DATA_PIECE_BYTES) {
          const more = await Promise.race([next, afterIo()]);
          if (more === null) break;
          if (more.done) {
            yield Buffer.concat(batch);
            return;
          }
          const bytes = encoded(more.value);
          batch.push(bytes);
          size += bytes.length;
          next = iterator.next();
        }
        yield Buffer.concat(batch);
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
      encoded(next.value);
    }
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const at = await request(new URL(path, opts.baseUrl), { headers: await opts.signedHeaders('GET', path, ''), dispatcher: opts.dispatcher })
        .then((r) => readResult(fromRequest(r), FramesAccepted))
        .catch(() => null);
      if (!at?.success) continue;
      const rest = Buffer.concat(sent.filter((frame) => frame.o >= at.data.nextOffset).map((frame) => frame.bytes));
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
    // The node has the invoke: said at once, before the runtime answers (a request that is not streamed may take long).
    yield { o: offset++, t: 'accept' };
    const call = await calling;
    if (!call.ok) {
      yield { o: offset++, t: 'error', code: call.code, message: call.message };
      return;
    }
    const response = call.response;
    yield { o: offset++, t: 'head', status: response.status, contentType: response.contentType ?? 'application/json' };
    let tokens = 0;
    const tail = new ByteTail();
    try {
      // A Readable's iterator hands over everything buffered at once: batches form under load by themselves,
      // and the first token never waits for a timer. The bytes go up as they are.
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        if (chunk.length === 0) continue;
        if (invoke.stream) tokens += countEvents(chunk);
        tail.push(chunk);
        for (let at = 0; at < chunk.length; at += DATA_PIECE_BYTES) yield { o: offset++, t: 'data', d: chunk.subarray(at, at + DATA_PIECE_BYTES) };
      }
    } catch {
      yield { o: offset++, t: 'error', code: signal.aborted ? abortCode(signal) : 'runtime_stream_broken', message: signal.aborted ? String(signal.reason) : 'the runtime stream broke' };
      return;
    }
    const ok = response.status >= 200 && response.status < 300;
    const text = tail.text();
    // A stream the runtime ended without `[DONE]` (an error event, or a crash) is a failure, however
    // politely the connection closed: the client must not take it for a complete answer.
    if (invoke.stream && ok && !text.includes(DONE_EVENT)) {
      // If the runtime's last event was an error, the client has it already: only the failure is recorded.
      const told = text.slice(text.lastIndexOf('data: ')).startsWith('data: {"error"');
      // The runtime stops at the deadline too (it got it as X-LunaNexa-Deadline): say which it was.
      if (signal.aborted || Date.now() >= invoke.deadline) {
        yield { o: offset++, t: 'error', code: signal.aborted ? abortCode(signal) : 'deadline_exceeded', message: 'the deadline passed during generation', told };
      } else {
        yield { o: offset++, t: 'error', code: 'runtime_stream_incomplete', message: 'the runtime ended the stream without [DONE]', told };
      }
      return;
    }
    // `[DONE]` is an event too but not a token. The usage is looked for once, in the tail: never per chunk.
    const usage = ok ? parseUsage(text) : NO_USAGE;
    yield { o: offset++, t: 'end', tokens: invoke.stream ? Math.max(0, tokens - 1) : 0, ...usage };
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
      const frames = produce(invoke, controller.signal, calling);
      // The runtime call is the critical path: its request reaches the socket before the upload is signed and
      // opened (the upload only has to be open by the time the runtime answers). The uplink is open already.
      const uploading = opts.uplink.usable() ? viaUplink(invoke.invocationId, frames) : afterIo().then(() => upload(invoke.invocationId, frames));
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
