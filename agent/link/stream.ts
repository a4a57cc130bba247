import { StringDecoder } from 'node:string_decoder';
import type { EventSourceMessage } from 'eventsource-parser';
import { request, type Dispatcher } from 'undici';
import { parseStreamEvent, StreamEvents, type StreamEvent } from '../../shared/contracts/stream.js';
import { backoffDelayMs } from './backoff.js';
import { boundedSseParser, STREAM_EVENT_MAX_CHARS, StreamEventTooLarge } from './bounded-sse.js';
import type { SignedClient } from './http.js';

export interface StreamLinkOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedHeaders: SignedClient['signedHeaders'];
  onEvent: (event: StreamEvent) => void;
  /** A message that is not in the catalogue or fails its schema: counted by the caller, and the link reconnects. */
  onMalformed: (error: string) => void;
  onState: (state: 'connecting' | 'open' | 'closed', detail?: string) => void;
  /** HTTP statuses after which reconnecting is pointless (revoked, unknown machine). */
  onFatal: (status: number) => void;
  /** No bytes for this long means the connection is half-open: reconnect. */
  silenceTimeoutMs?: number;
}

const PATH = '/agent/v1/stream';
const KNOWN = new Set(Object.keys(StreamEvents));

/**
 * The dial-out stream: an SSE connection the agent opens and keeps open, with jittered exponential backoff
 * between attempts, `Last-Event-ID` on reconnect, and a silence watchdog fed by every byte (the server's
 * comment keep-alives included). Read as a Node stream into eventsource-parser (bounded per event): every `invoke` of the relay
 * arrives here, and the web-stream layers of fetch and EventSource cost more than the parsing.
 */
export function openStreamLink(opts: StreamLinkOptions) {
  /** The attempt in progress: aborting it ends its request. */
  let current: AbortController | null = null;
  let open = false;
  let attempt = 0;
  let lastEventId: string | undefined;
  let lastByteAt = Date.now();
  let stopped = false;
  let retryTimer: NodeJS.Timeout | undefined;
  const silence = opts.silenceTimeoutMs ?? 45_000;

  const watchdog = setInterval(
    () => {
      if (open && Date.now() - lastByteAt > silence) reconnect('stream went silent');
    },
    Math.min(silence, 5_000),
  );

  /** Ends the attempt in progress and connects again: after a backoff, or `now`. */
  function reconnect(reason: string, now = false) {
    current?.abort();
    current = null;
    open = false;
    if (stopped) return;
    opts.onState('closed', reason);
    clearTimeout(retryTimer);
    if (now) {
      attempt = 0;
      void connect();
    } else retryTimer = setTimeout(() => void connect(), backoffDelayMs(attempt++, { baseMs: 250, capMs: 30_000 }));
  }

  function handle(item: EventSourceMessage) {
    if (item.id !== undefined) lastEventId = item.id;
    // An unnamed event is a `message` (the SSE default), which is none of ours.
    const name = item.event ?? 'message';
    if (name === 'message') {
      opts.onMalformed('unnamed stream message');
      return;
    }
    // Events of a newer protocol are not ours to act on.
    if (!KNOWN.has(name)) return;
    const parsed = parseStreamEvent(name, item.data);
    if (parsed.success) opts.onEvent(parsed.value);
    else {
      opts.onMalformed(parsed.error);
      reconnect('malformed stream message');
    }
  }

  async function connect() {
    if (stopped) return;
    opts.onState('connecting');
    const attemptController = new AbortController();
    current = attemptController;
    try {
      const extra: Record<string, string> = { accept: 'text/event-stream' };
      if (lastEventId) extra['last-event-id'] = lastEventId;
      const response = await request(new URL(PATH, opts.baseUrl), {
        headers: await opts.signedHeaders('GET', PATH, '', extra),
        dispatcher: opts.dispatcher,
        signal: attemptController.signal,
      });
      if (response.statusCode === 401 || response.statusCode === 403) opts.onFatal(response.statusCode);
      const type = response.headers['content-type'];
      if (response.statusCode !== 200 || !String(type).startsWith('text/event-stream')) {
        // The refusal below says what went wrong; a body that breaks off while drained adds nothing to it.
        await response.body.dump().catch(() => {});
        throw new Error(`HTTP ${response.statusCode}`);
      }
      if (current !== attemptController) return;
      open = true;
      attempt = 0;
      lastByteAt = Date.now();
      opts.onState('open');
      const decoder = new StringDecoder('utf8');
      // One event is bounded (a signed desired state is far smaller): past it the connection is dropped, said why.
      const parser = boundedSseParser({ onEvent: handle, maxEventChars: STREAM_EVENT_MAX_CHARS });
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        lastByteAt = Date.now();
        try {
          parser.feed(decoder.write(chunk));
        } catch (error) {
          if (error instanceof StreamEventTooLarge) opts.onMalformed(error.message);
          throw error;
        }
        if (current !== attemptController) return;
      }
      throw new Error('the control plane ended the stream');
    } catch (error) {
      // An attempt already given up on (reconnect, close) has nothing left to report.
      if (current === attemptController) reconnect(`stream error (${error instanceof Error ? error.message : String(error)})`);
    }
  }

  void connect();
  return {
    /**
     * Reconnects at once, without backoff, to be sent the full desired state again: the control plane holds a
     * newer generation than the one that reached this agent (a `desired` event was lost, or a backoff is running).
     */
    refetch(reason: string) {
      reconnect(reason, true);
    },
    /** True while the stream is connected. */
    isOpen(): boolean {
      return open;
    },
    close() {
      stopped = true;
      clearInterval(watchdog);
      clearTimeout(retryTimer);
      current?.abort();
      current = null;
    },
  };
}
