import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStreamLink } from '../../agent/link/stream.js';
import type { StreamEvent } from '../../shared/contracts/stream.js';

async function waitFor<T>(check: () => T, what: string, timeoutMs = 5_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('stream link refetch', () => {
  let server: Server;
  let url: string;
  /** Each connection attempt: its Last-Event-ID, and its response while it is open. */
  const attempts: Array<{ lastEventId: string | undefined; res: ServerResponse; closed: boolean }> = [];
  /** How the server answers the next attempt. */
  let answer: 'stream' | 'unavailable' = 'stream';
  let link: ReturnType<typeof openStreamLink> | undefined;

  beforeEach(async () => {
    attempts.length = 0;
    answer = 'stream';
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const attempt = { lastEventId: req.headers['last-event-id'] as string | undefined, res, closed: false };
      attempts.push(attempt);
      res.on('close', () => (attempt.closed = true));
      if (answer === 'unavailable') {
        res.writeHead(503, { 'content-type': 'application/json' });
        return res.end('{}');
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const hello = { protocol: 1, machineId: 'mch_1', connectionId: `c${attempts.length}`, keepAliveMs: 15_000 };
      res.write(`id: desired-${attempts.length}\nevent: hello\ndata: ${JSON.stringify(hello)}\n\n`);
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

  function open(states: string[], events: StreamEvent[] = []) {
    link = openStreamLink({
      baseUrl: url,
      dispatcher: new Agent(),
      signedHeaders: async (_method, _path, _body, extra = {}) => ({ ...extra }),
      onEvent: (event) => void events.push(event),
      onMalformed: (error) => {
        throw new Error(error);
      },
      onState: (state) => void states.push(state),
      onFatal: () => {},
    });
    return link;
  }

  it('reconnects an open stream at once, resuming from the last event id', async () => {
    const states: string[] = [];
    const events: StreamEvent[] = [];
    const link = open(states, events);
    await waitFor(() => link.isOpen() && events.length === 1, 'the stream to open');
    states.length = 0;
    link.refetch('the control plane holds a newer generation');
    // Synchronously: no backoff timer between the close and the new attempt.
    expect(states).toEqual(['closed', 'connecting']);
    expect(link.isOpen()).toBe(false);
    await waitFor(() => attempts.length === 2 && link.isOpen(), 'the new connection');
    expect(attempts[1]!.lastEventId).toBe('desired-1');
    await waitFor(() => attempts[0]!.closed, 'the old connection to close');
    expect(events.map((e) => e.event)).toEqual(['hello', 'hello']);
  });

  it('cuts a backoff short', async () => {
    answer = 'unavailable';
    const states: string[] = [];
    const link = open(states);
    await waitFor(() => attempts.length === 1 && states.includes('closed'), 'the first attempt to fail');
    // The link now waits out a backoff of at least 100 ms before its next attempt.
    answer = 'stream';
    states.length = 0;
    link.refetch('the control plane holds a newer generation');
    expect(states).toEqual(['closed', 'connecting']);
    await waitFor(() => link.isOpen(), 'the stream to open');
    expect(attempts).toHaveLength(2);
  });

  it('does nothing once closed', async () => {
    const states: string[] = [];
    const link = open(states);
    await waitFor(() => link.isOpen(), 'the stream to open');
    link.close();
    states.length = 0;
    link.refetch('too late');
    expect(states).toEqual([]);
    await new Promise((r) => setTimeout(r, 50));
    expect(attempts).toHaveLength(1);
  });
});
