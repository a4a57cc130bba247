import { createParser, type EventSourceMessage, type ParseError } from 'eventsource-parser';

/**
 * The largest event the agent reads off its stream, in characters. A desired state carries each assigned version's
 * manifest with a signed URL per file (up to 10,000 files each, base64 in a JWS): several MiB are legitimate, so the
 * bound is well above that and well below what hurts a node. A plane (or a path without TLS) that sends more is cut
 * off, the error logged, and the link reconnects.
 */
export const STREAM_EVENT_MAX_CHARS = 64 * 1024 * 1024;

/** An event past the bound: the connection is dropped. */
export class StreamEventTooLarge extends Error {
  override readonly name = 'StreamEventTooLarge';
  constructor(maxChars: number) {
    super(`stream event exceeds ${maxChars} characters`);
  }
}

/**
 * eventsource-parser with a bound on what one event holds (its pending line and its data lines together), and
 * each character handed to it once: text without a line break is only gathered here (O(1) a chunk) and given to
 * the parser, joined, with the chunk that ends the line, so that a long line in many small chunks costs linear
 * work whatever the parser does with a partial line. `feed` throws `StreamEventTooLarge` past the bound; the
 * parser is spent then (make a new one for the next connection).
 */
export function boundedSseParser(
  opts: { onEvent: (event: EventSourceMessage) => void; maxEventChars: number },
  create: typeof createParser = createParser,
): { feed(text: string): void } {
  let failed: StreamEventTooLarge | null = null;
  const parser = create({
    onEvent: opts.onEvent,
    maxBufferSize: opts.maxEventChars,
    onError: (error: ParseError) => {
      if (error.type === 'max-buffer-size-exceeded') failed = new StreamEventTooLarge(opts.maxEventChars);
    },
  });
  const pending: string[] = [];
  let pendingChars = 0;
  return {
    feed(text: string) {
      if (failed) throw failed;
      pending.push(text);
      pendingChars += text.length;
      if (text.indexOf('\n') === -1 && text.indexOf('\r') === -1) {
        if (pendingChars > opts.maxEventChars) throw (failed = new StreamEventTooLarge(opts.maxEventChars));
        return;
      }
      const whole = pending.length === 1 ? text : pending.join('');
      pending.length = 0;
      pendingChars = 0;
      parser.feed(whole);
      if (failed) throw failed;
    },
  };
}
