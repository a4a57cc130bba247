import { createServer, type Server } from 'node:http';
import { createParser } from 'eventsource-parser';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { boundedSseParser, STREAM_EVENT_MAX_CHARS } from '../../agent/link/bounded-sse.js';
import { openStreamLink } from '../../agent/link/stream.js';
import type { StreamEvent } from '../../shared/contracts/stream.js';

/**
 * A hostile control plane (or a path without TLS) streams an event without end: the agent holds at most
 * STREAM_EVENT_MAX_CHARS of it, then drops the connection, logs why and reconnects; a long line fed in small chunks
 * costs work linear in its length.
 */
async function waitFor<T>(check: () => T, what: string, timeoutMs = 10_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('the agent stream against an endless event', () => {
  let server: Server;
  let url: string;
  let connections = 0;
  let link: ReturnType<typeof openStreamLink> | undefined;

  beforeEach(async () => {
    connections = 0;
    server = createServer((_req, res) => {
      connections += 1;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const hello = { protocol: 1, machineId: 'mch_1', connectionId: `c${connections}`, keepAliveMs: 15_000 };
      res.write(`event: hello\ndata: ${JSON.stringify(hello)}\n\nevent: desired\ndata: `);
      // 96 MiB of one line unless the agent goes away first.
      const piece = 'x'.repeat(64 * 1024);
      let sent = 0;
      const more = () => {
        while (sent < 1536 && !res.destroyed) {
          sent += 1;
          if (!res.write(piece)) return void res.once('drain', more);
        }
      };
      more();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  });
  afterEach(async () => {
    link?.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('drops the connection past the bound with a logged reason, and reconnects', async () => {
    const states: Array<{ state: string; detail?: string }> = [];
    const malformed: string[] = [];
    const events: StreamEvent[] = [];
    link = openStreamLink({
      baseUrl: url,
      dispatcher: new Agent(),
      signedHeaders: async (_method, _path, _body, extra = {}) => ({ ...extra }),
      onEvent: (event) => void events.push(event),
      onMalformed: (error) => void malformed.push(error),
      onState: (state, detail) => void states.push({ state, detail }),
      onFatal: () => {},
    });
    const closed = await waitFor(() => states.find((s) => s.state === 'closed'), 'the link to drop the endless event');
    expect(closed.detail).toMatch(/stream event exceeds 67108864 characters/);
    expect(malformed.some((m) => /exceeds 67108864 characters/.test(m))).toBe(true);
    expect(events.map((e) => e.event)).toEqual(['hello']);
    await waitFor(() => connections >= 2, 'the reconnect');
  });
});

describe('boundedSseParser', () => {
  /** eventsource-parser, counting what it is fed. */
  function counting() {
    const fed = { calls: 0, chars: 0 };
    const factory: typeof createParser = (config) => {
      const parser = createParser(config);
      return {
        ...parser,
        feed(chunk: string) {
          fed.calls += 1;
          fed.chars += chunk.length;
          parser.feed(chunk);
        },
      };
    };
    return { fed, factory };
  }

  it('feeds a 4 MiB line given in 64-byte chunks to the parser in O(n): each character once, in one call', () => {
    const { fed, factory } = counting();
    const data: string[] = [];
    const parser = boundedSseParser({ onEvent: (e) => void data.push(e.data), maxEventChars: STREAM_EVENT_MAX_CHARS }, factory);
    const line = `data: ${'y'.repeat(4 * 1024 * 1024 - 64)}`;
    for (let i = 0; i < line.length; i += 64) parser.feed(line.slice(i, i + 64));
    parser.feed('\n\n');
    expect(data).toHaveLength(1);
    expect(data[0]!.length).toBe(4 * 1024 * 1024 - 64);
    expect(fed.chars).toBe(line.length + 2);
    expect(fed.calls).toBe(1);
  });

  it('refuses an event past its bound, whether one line or many data lines', () => {
    const oneLine = boundedSseParser({ onEvent: () => {}, maxEventChars: 1_000 });
    expect(() => {
      for (let i = 0; i < 20; i++) oneLine.feed('z'.repeat(64));
    }).toThrow(/stream event exceeds 1000 characters/);
    const manyLines = boundedSseParser({ onEvent: () => {}, maxEventChars: 1_000 });
    expect(() => {
      for (let i = 0; i < 40; i++) manyLines.feed(`data: ${'z'.repeat(58)}\n`);
    }).toThrow(/stream event exceeds 1000 characters/);
    // Events within the bound pass, however many.
    const events: string[] = [];
    const fine = boundedSseParser({ onEvent: (e) => void events.push(e.data), maxEventChars: 1_000 });
    for (let i = 0; i < 100; i++) fine.feed(`event: x\ndata: ${'z'.repeat(500)}\n\n`);
    expect(events).toHaveLength(100);
  });
});
