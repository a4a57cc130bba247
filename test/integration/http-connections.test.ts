import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/**
 * The Node server's connection bounds (docs/security.md, bounds): a client that trickles its headers is cut after
 * `headersTimeoutMs` with 408, past `maxConnections` a new connection is refused at once, and a body over its limit
 * is answered 413 and then read and discarded (a lingering close, bounded), so that a client still sending it gets
 * the answer rather than a reset (EPIPE).
 */
let plane: TestPlane;
let port: number;
beforeAll(async () => {
  plane = await startTestPlane({ store: 'pglite', config: { headersTimeoutMs: 1_000, maxConnections: 4 } });
  port = Number(new URL(plane.url).port);
});
afterAll(async () => {
  await plane?.close();
});

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** What the server sent until it closed the connection, and how it closed it. */
function ending(socket: Socket): Promise<{ data: string; error: string | null; ms: number }> {
  const started = Date.now();
  let data = '';
  let error: string | null = null;
  socket.on('data', (chunk) => (data += chunk));
  socket.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? e.message));
  return new Promise((resolve) => socket.once('close', () => resolve({ data, error, ms: Date.now() - started })));
}

describe('the Node server', () => {
  it('answers a trickled header 408 after headersTimeoutMs, not after a minute and more', async () => {
    const socket = await open();
    const ended = ending(socket);
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n');
    const trickle = setInterval(() => {
      if (!socket.destroyed) socket.write('X-a: b\r\n');
    }, 200);
    const outcome = await Promise.race([ended, new Promise<null>((resolve) => setTimeout(() => resolve(null), 6_000))]);
    clearInterval(trickle);
    socket.destroy();
    expect(outcome, 'the connection still open after 6 s').not.toBeNull();
    expect(outcome!.data).toMatch(/^HTTP\/1\.1 408/);
  });

  it('refuses connections past maxConnections, and takes new ones once some close', async () => {
    const held: Socket[] = [];
    try {
      for (let i = 0; i < 4; i++) held.push(await open());
      // Let the server count them.
      await new Promise((r) => setTimeout(r, 100));
      const extra = await open();
      const outcome = await Promise.race([ending(extra), new Promise<null>((resolve) => setTimeout(() => resolve(null), 2_000))]);
      extra.destroy();
      expect(outcome, 'the fifth connection was kept').not.toBeNull();
      expect(outcome!.data).toBe('');
    } finally {
      for (const socket of held) socket.destroy();
    }
    await new Promise((r) => setTimeout(r, 200));
    expect((await fetch(`${plane.url}/healthz`)).status).toBe(200);
  });

  it('answers an oversized body 413 and lets the client finish sending it (no reset)', async () => {
    const cases = [
      ['/v1/chat/completions', false],
      ['/api/v1/deployments', false],
      ['/v1/chat/completions', true],
      ['/api/v1/deployments', true],
    ] as const;
    for (const [path, chunked] of cases) {
      const socket = await open();
      const ended = ending(socket);
      const size = 5 * 1024 * 1024;
      const length = chunked ? 'transfer-encoding: chunked' : `content-length: ${size}`;
      socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${plane.adminToken}\r\ncontent-type: application/json\r\n${length}\r\n\r\n`);
      const raw = Buffer.alloc(64 * 1024, 'a');
      const piece = chunked ? Buffer.concat([Buffer.from(`${raw.length.toString(16)}\r\n`), raw, Buffer.from('\r\n')]) : raw;
      let sent = 0;
      await new Promise<void>((resolve) => {
        const more = () => {
          while (sent < size && !socket.destroyed) {
            sent += raw.length;
            if (!socket.write(piece)) return void socket.once('drain', more);
          }
          if (chunked && !socket.destroyed) socket.write('0\r\n\r\n');
          resolve();
        };
        more();
        socket.once('close', () => resolve());
      });
      const outcome = await ended;
      expect(outcome.error, `${path} (chunked: ${chunked}): ${outcome.data.slice(0, 80)}`).toBeNull();
      expect(sent).toBe(size);
      expect(outcome.data).toMatch(/^HTTP\/1\.1 413/);
      expect(outcome.data.toLowerCase()).toContain('connection: close');
    }
  });
});
