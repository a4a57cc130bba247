import type { Context } from 'hono';
import type { AppEnv } from '../../dataplane/ports.js';
import { openStream } from './node-io.js';
import { afterThisTurn } from '../../../shared/turn-batch.js';

/** An SSE response of our own: events are queued without waiting and written together once per event-loop turn. */
export interface SseOut {
  /** What the handler returns. */
  response: Response;
  /** Queues one event (`data` is one line: JSON never holds a raw newline). */
  event(name: string, data: string, id?: string): void;
  /** Queues a comment (keep-alive). */
  comment(text: string): void;
  /** Ends the response after what is queued. */
  close(): void;
}

/**
 * Opens a server-sent event stream written straight to the Node response (`openStream`): every event queued in
 * one turn of the event loop goes out in one write, whatever their number, and the order they were queued in is
 * the order they arrive. A reader that falls `maxQueuedBytes` behind is cut off (`onGone`) rather than buffered
 * without end.
 */
export function openSse(c: Context<AppEnv>, headers: Record<string, string>, onGone: () => void, maxQueuedBytes = 16 * 1024 * 1024): SseOut {
  let gone = false;
  const leave = () => {
    if (gone) return;
    gone = true;
    onGone();
  };
  const sink = openStream(
    c,
    200,
    { 'content-type': 'text/event-stream', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no', ...headers },
    leave,
  );
  let queued: string[] = [];
  let queuedBytes = 0;
  let scheduled = false;
  let writing = false;
  let closing = false;
  const flush = () => {
    scheduled = false;
    if (gone || writing) return;
    const chunks = queued;
    queued = [];
    queuedBytes = 0;
    if (closing) {
      gone = true;
      sink.end(chunks);
      return;
    }
    if (chunks.length === 0) return;
    writing = true;
    void sink.write([chunks.join('')]).then(() => {
      writing = false;
      if (queued.length > 0 || closing) flush();
    });
  };
  const queue = (text: string) => {
    if (gone || closing) return;
    queued.push(text);
    queuedBytes += text.length;
    if (queuedBytes > maxQueuedBytes) {
      queued = [];
      sink.end([]);
      leave();
      return;
    }
    if (!scheduled) {
      scheduled = true;
      afterThisTurn(flush);
    }
  };
  return {
    response: sink.response,
    event(name, data, id) {
      queue(id === undefined ? `event: ${name}\ndata: ${data}\n\n` : `event: ${name}\nid: ${id}\ndata: ${data}\n\n`);
    },
    comment(text) {
      queue(`: ${text}\n\n`);
    },
    close() {
      if (gone || closing) return;
      closing = true;
      if (!scheduled && !writing) flush();
    },
  };
}
