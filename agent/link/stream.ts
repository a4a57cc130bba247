import { EventSource } from 'eventsource';
import { fetch, type Dispatcher, type RequestInit } from 'undici';
import { parseStreamEvent, StreamEvents, type StreamEvent } from '../../shared/contracts/stream.js';
import { backoffDelayMs } from './backoff.js';

export interface StreamLinkOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedInit: (method: string, path: string, body: string, extra?: Record<string, string>) => Promise<RequestInit>;
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

/**
 * The dial-out stream: an SSE connection the agent opens and keeps open, with jittered exponential backoff
 * between attempts, `Last-Event-ID` on reconnect, and a silence watchdog fed by the server's keep-alives.
 */
export function openStreamLink(opts: StreamLinkOptions) {
  let source: EventSource | null = null;
  let attempt = 0;
  let lastEventId: string | undefined;
  let lastByteAt = Date.now();
  let stopped = false;
  let retryTimer: NodeJS.Timeout | undefined;
  const silence = opts.silenceTimeoutMs ?? 45_000;

  const watchdog = setInterval(() => {
    if (source && source.readyState === EventSource.OPEN && Date.now() - lastByteAt > silence) reconnect('stream went silent');
  }, Math.min(silence, 5_000));

  function reconnect(reason: string) {
    source?.close();
    source = null;
    if (stopped) return;
    opts.onState('closed', reason);
    clearTimeout(retryTimer);
    retryTimer = setTimeout(connect, backoffDelayMs(attempt++, { baseMs: 250, capMs: 30_000 }));
  }

  function connect() {
    if (stopped) return;
    opts.onState('connecting');
    const es = new EventSource(new URL(PATH, opts.baseUrl), {
      fetch: async (url, init) => {
        const extra: Record<string, string> = { accept: 'text/event-stream' };
        if (lastEventId) extra['last-event-id'] = lastEventId;
        const signed = await opts.signedInit('GET', PATH, '', extra);
        const response = await fetch(url, { ...signed, signal: init.signal as AbortSignal });
        if (response.status === 401 || response.status === 403) opts.onFatal(response.status);
        lastByteAt = Date.now();
        // Tap the body so that comment keep-alives, which EventSource does not surface, feed the watchdog.
        const body = response.body as ReadableStream<Uint8Array> | null;
        const tapped = body?.pipeThrough(
          new TransformStream<Uint8Array, Uint8Array>({
            transform(chunk, controller) {
              lastByteAt = Date.now();
              controller.enqueue(chunk);
            },
          }),
        );
        return { body: tapped ?? null, url: response.url, status: response.status, redirected: response.redirected, headers: response.headers };
      },
    });
    source = es;
    es.onopen = () => {
      attempt = 0;
      opts.onState('open');
    };
    es.onerror = (event) => {
      if (source === es) reconnect(`stream error${event.code ? ` (HTTP ${event.code})` : ''}`);
    };
    for (const name of Object.keys(StreamEvents)) {
      es.addEventListener(name, (message) => {
        if (message.lastEventId) lastEventId = message.lastEventId;
        const parsed = parseStreamEvent(name, message.data);
        if (parsed.success) opts.onEvent(parsed.value);
        else {
          opts.onMalformed(parsed.error);
          reconnect('malformed stream message');
        }
      });
    }
    es.onmessage = () => {
      opts.onMalformed('unnamed stream message');
    };
  }

  connect();
  return {
    close() {
      stopped = true;
      clearInterval(watchdog);
      clearTimeout(retryTimer);
      source?.close();
      source = null;
    },
  };
}
