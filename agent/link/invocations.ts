import { fetch, type Dispatcher, type RequestInit } from 'undici';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { FramesAccepted } from '../../shared/contracts/relay.js';
import type { RuntimeAdapter, RuntimeHandle } from '../runtimes/adapter.js';
import { readResult } from './http.js';

/** Largest frame: bytes beyond it start the next frame. */
const BATCH_BYTES = 32 * 1024;

/** Resolves after pending I/O callbacks ran: whatever the runtime already sent has been read by then. */
const afterIo = () => new Promise<null>((resolve) => setImmediate(() => resolve(null)));

export interface InvocationRunnerOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedInit: (method: string, path: string, body: string, extra?: Record<string, string>) => Promise<RequestInit>;
  runtime: (assignmentId: string) => { handle: RuntimeHandle; adapter: RuntimeAdapter } | null;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/** Counts generated tokens in OpenAI SSE bytes without parsing them: one `data:` event per token chunk. */
function countEvents(text: string): number {
  let count = 0;
  for (let at = text.indexOf('data: '); at !== -1; at = text.indexOf('data: ', at + 6)) count += 1;
  return count;
}

/**
 * Runs invocations sent on the stream: calls the runtime through its adapter and streams the response back as
 * NDJSON frames on one upload per invocation (resumable by offset), honouring cancel and the deadline.
 */
export function createInvocationRunner(opts: InvocationRunnerOptions) {
  const running = new Map<string, AbortController>();

  async function upload(invocationId: string, frames: AsyncIterable<Frame>, sent: Frame[]): Promise<void> {
    const path = `/agent/v1/invocations/${encodeURIComponent(invocationId)}/frames`;
    const encoder = new TextEncoder();
    const iterator = frames[Symbol.asyncIterator]();
    const body = new ReadableStream<Uint8Array>({
      // An empty line (skipped by the control plane) opens the upload at once: its start is the node's ack of
      // the invoke, which matters when the runtime answers only at the end (a request that is not streamed).
      start(controller) {
        controller.enqueue(encoder.encode('\n'));
      },
      async pull(controller) {
        const next = await iterator.next();
        if (next.done) return controller.close();
        sent.push(next.value);
        controller.enqueue(encoder.encode(`${JSON.stringify(next.value)}\n`));
      },
    });
    const init = await opts.signedInit('POST', path, '', { 'content-type': 'application/x-ndjson' });
    const first = await fetch(new URL(path, opts.baseUrl), { ...init, body, duplex: 'half' } as unknown as RequestInit).then(
      (response) => readResult(response, FramesAccepted),
      (error: unknown) => ({ success: false as const, status: 0, error: { code: 'network_error', message: String(error) } }),
    );
    if (first.success || first.status !== 0) {
      if (!first.success) throw new Error(`${first.error.code}: ${first.error.message}`);
      return;
    }
    // The upload broke: drain what is left, ask where the control plane stopped, resend from there.
    for (;;) {
      const next = await iterator.next();
      if (next.done) break;
      sent.push(next.value);
    }
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const at = await fetch(new URL(path, opts.baseUrl), await opts.signedInit('GET', path, '')).then((r) => readResult(r, FramesAccepted)).catch(() => null);
      if (!at?.success) continue;
      const rest = sent.filter((frame) => frame.o >= at.data.nextOffset).map((frame) => `${JSON.stringify(frame)}\n`).join('');
      const resent = await fetch(new URL(path, opts.baseUrl), { ...(await opts.signedInit('POST', path, '', { 'content-type': 'application/x-ndjson' })), body: rest }).catch(() => null);
      if (resent?.ok) return;
    }
    throw new Error('frames upload failed after resuming');
  }

  type Call = { ok: true; response: Response } | { ok: false; code: string; message: string };

  /** Starts the runtime call at once, so it overlaps with opening the frames upload. */
  async function callRuntime(invoke: Invoke, signal: AbortSignal): Promise<Call> {
    const runtime = opts.runtime(invoke.assignmentId);
    if (!runtime) return { ok: false, code: 'runtime_unavailable', message: 'the runtime of this assignment is not ready on this node' };
    try {
      const response = await runtime.adapter.invoke(runtime.handle, invoke.path, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-lunanexa-deadline': new Date(invoke.deadline).toISOString(),
          ...(invoke.idempotencyKey ? { 'idempotency-key': invoke.idempotencyKey } : {}),
        },
        body: invoke.body,
        signal,
      });
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
    yield { o: offset++, t: 'head', status: response.status, contentType: response.headers.get('content-type') ?? 'application/json' };
    const reader = response.body?.getReader();
    if (!reader) {
      yield { o: offset++, t: 'end', tokens: 0 };
      return;
    }
    const decoder = new TextDecoder();
    let tokens = 0;
    let pending = '';
    let tail = '';
    let read: Promise<ReadableStreamReadResult<Uint8Array>> | null = null;
    try {
      for (;;) {
        read ??= reader.read();
        // With bytes in hand, take only what has already arrived, then send: batches form under load, and
        // the first token never waits for a timer.
        const result = pending ? await Promise.race([read, afterIo()]) : await read;
        if (result === null || result.done || pending.length >= BATCH_BYTES) {
          if (pending) {
            tokens += countEvents(pending);
            tail = (tail + pending).slice(-1024);
            yield { o: offset++, t: 'data', d: pending };
            pending = '';
          }
          if (result === null) continue;
        }
        if (result.done) break;
        read = null;
        pending += decoder.decode(result.value, { stream: true });
      }
    } catch {
      if (pending) yield { o: offset++, t: 'data', d: pending };
      yield { o: offset++, t: 'error', code: signal.aborted ? abortCode(signal) : 'runtime_stream_broken', message: signal.aborted ? String(signal.reason) : 'the runtime stream broke' };
      return;
    }
    // A stream the runtime ended without `[DONE]` (an error event, or a crash) is a failure, however
    // politely the connection closed: the client must not take it for a complete answer.
    if (invoke.stream && response.ok && !tail.includes('data: [DONE]')) {
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
      const sent: Frame[] = [];
      void upload(invoke.invocationId, produce(invoke, controller.signal, callRuntime(invoke, controller.signal)), sent)
        .catch((error: unknown) => {
          // The control plane no longer wants these frames (cancelled, finished elsewhere): stop the runtime call.
          controller.abort('upload_refused');
          opts.log('frames upload failed', { invocationId: invoke.invocationId, error: error instanceof Error ? error.message : String(error) });
        })
        .finally(() => {
          clearTimeout(timer);
          running.delete(invoke.invocationId);
            });
    },
    cancel(invocationId: string, reason: string): void {
      running.get(invocationId)?.abort(reason);
    },
    active(): number {
      return running.size;
    },
  };
}
