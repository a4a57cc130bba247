import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { DATA_PIECE_BYTES } from '../../shared/frame-codec.js';
import type { RuntimeResponse } from '../runtimes/adapter.js';
import type { InvokeTarget } from '../supervisor/supervisor.js';
import { ByteTail, NO_USAGE, parseUsage } from './answer-tail.js';
import type { SendWindow } from './window.js';

const DATA_EVENT = Buffer.from('data: ');
const DONE_EVENT = 'data: [DONE]';

/** Counts generated tokens in OpenAI SSE bytes without parsing them: one `data:` event per token chunk. */
function countEvents(bytes: Buffer): number {
  let count = 0;
  for (let at = bytes.indexOf(DATA_EVENT); at !== -1; at = bytes.indexOf(DATA_EVENT, at + DATA_EVENT.length)) count += 1;
  return count;
}

function abortCode(signal: AbortSignal): string {
  return signal.reason === 'deadline_exceeded' ? 'deadline_exceeded' : 'cancelled';
}

export type Call = { ok: true; response: RuntimeResponse } | { ok: false; code: string; message: string };

/**
 * Starts the runtime call at once, so it overlaps with opening the frames upload. A runtime that takes no
 * invocation (draining, not ready) is answered with an error frame before any head: the relay retries that on
 * another replica.
 */
export async function callRuntime(invoke: Invoke, target: InvokeTarget, signal: AbortSignal, answered: () => void): Promise<Call> {
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

type Unnumbered<F> = F extends Frame ? Omit<F, 'o'> : never;

/** The frame that ends an answer the runtime sent to its end: `end` with the usage, or why it is incomplete. Pure. */
function lastFrame(invoke: Invoke, signal: AbortSignal, status: number, text: string, tokens: number): Unnumbered<Frame> {
  const ok = status >= 200 && status < 300;
  // A stream the runtime ended without `[DONE]` (an error event, or a crash) is a failure, however
  // politely the connection closed: the client must not take it for a complete answer.
  if (invoke.stream && ok && !text.includes(DONE_EVENT)) {
    // If the runtime's last event was an error, the client has it already: only the failure is recorded.
    const told = text.slice(text.lastIndexOf('data: ')).startsWith('data: {"error"');
    // The runtime stops at the deadline too (it got it as X-LunaNexa-Deadline): say which it was.
    if (signal.aborted || Date.now() >= invoke.deadline) {
      return { t: 'error', code: signal.aborted ? abortCode(signal) : 'deadline_exceeded', message: 'the deadline passed during generation', told };
    }
    return { t: 'error', code: 'runtime_stream_incomplete', message: 'the runtime ended the stream without [DONE]', told };
  }
  // `[DONE]` is an event too but not a token. The usage is looked for once, in the tail: never per chunk.
  const usage = ok ? parseUsage(text) : NO_USAGE;
  return { t: 'end', tokens: invoke.stream ? Math.max(0, tokens - 1) : 0, ...usage };
}

/**
 * The frames of one invocation: accepted at once, then the runtime's head, its bytes as they come, and the end.
 * With a window, the runtime is read no further ahead of the holder's credit than it allows.
 */
export async function* produceFrames(invoke: Invoke, signal: AbortSignal, calling: Promise<Call>, window: SendWindow | null): AsyncGenerator<Frame> {
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
      for (let at = 0; at < chunk.length; at += DATA_PIECE_BYTES) {
        const piece = chunk.subarray(at, at + DATA_PIECE_BYTES);
        const room = window?.take(piece.length, signal);
        if (room) await room;
        yield { o: offset++, t: 'data', d: piece };
      }
    }
  } catch {
    yield {
      o: offset++,
      t: 'error',
      code: signal.aborted ? abortCode(signal) : 'runtime_stream_broken',
      message: signal.aborted ? String(signal.reason) : 'the runtime stream broke',
    };
    return;
  }
  yield { o: offset++, ...lastFrame(invoke, signal, response.status, tail.text(), tokens) };
}
