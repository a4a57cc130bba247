import { afterAll, describe, expect, it } from 'vitest';
import { createServer, type Server, type Socket } from 'node:net';
import { fetch } from 'undici';
import { unreachableMessage } from '../../agent/link/reachability.js';

/** undici's shape: a bare `fetch failed` whose `cause` says why. */
const fetchFailed = (cause: Error & { code?: string }) => new TypeError('fetch failed', { cause });
const systemError = (code: string, message: string) => Object.assign(new Error(message), { code });

const listen = (server: Server) => new Promise<number>((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port)));
const close = (server: Server) => new Promise<void>((resolve) => server.close(() => resolve()));

describe('unreachableMessage', () => {
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await close(silent);
  });

  it('names a refused connection, from a real fetch to a closed loopback port', async () => {
    const server = createServer();
    const port = await listen(server);
    await close(server);
    const url = `http://127.0.0.1:${port}`;
    const error = await fetch(`${url}/agent/v1/enroll`, { method: 'POST' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TypeError);
    expect(unreachableMessage(url, error)).toBe(`cannot reach the control plane at ${url}: connection refused (ECONNREFUSED)`);
  });

  it('names a timeout, from a real fetch to a server that never answers', async () => {
    const url = `http://127.0.0.1:${await listen(silent)}`;
    const error = await fetch(url, { signal: AbortSignal.timeout(100) }).catch((e: unknown) => e);
    expect(unreachableMessage(url, error)).toBe(`cannot reach the control plane at ${url}: no response in time`);
  });

  it('names DNS, TLS and undici failures by their code', () => {
    const url = 'https://lunanexa.example';
    const cases: Array<[Error, string]> = [
      [fetchFailed(systemError('ENOTFOUND', 'getaddrinfo ENOTFOUND lunanexa.example')), 'host not found (ENOTFOUND)'],
      [fetchFailed(systemError('CERT_HAS_EXPIRED', 'certificate has expired')), 'its TLS certificate has expired (CERT_HAS_EXPIRED)'],
      [fetchFailed(systemError('DEPTH_ZERO_SELF_SIGNED_CERT', 'self-signed certificate')), 'its TLS certificate is self-signed (DEPTH_ZERO_SELF_SIGNED_CERT)'],
      [fetchFailed(systemError('UND_ERR_CONNECT_TIMEOUT', 'Connect Timeout Error')), 'connection timed out (UND_ERR_CONNECT_TIMEOUT)'],
      // Node's happy-eyeballs connect wraps each address's failure in an AggregateError that has the code.
      [
        fetchFailed(Object.assign(new AggregateError([systemError('ECONNREFUSED', 'connect ECONNREFUSED ::1:443')], ''), { code: 'ECONNREFUSED' })),
        'connection refused (ECONNREFUSED)',
      ],
    ];
    for (const [error, reason] of cases) expect(unreachableMessage(url, error)).toBe(`cannot reach the control plane at ${url}: ${reason}`);
  });

  it('falls back to the innermost message for a cause it does not know', () => {
    const url = 'https://lunanexa.example';
    const proxy = fetchFailed(systemError('UND_ERR_ABORTED', 'Proxy response (407) !== 200 when HTTP Tunneling'));
    expect(unreachableMessage(url, proxy)).toBe(`cannot reach the control plane at ${url}: Proxy response (407) !== 200 when HTTP Tunneling (UND_ERR_ABORTED)`);
    expect(unreachableMessage(url, new TypeError('fetch failed'))).toBe(`cannot reach the control plane at ${url}: fetch failed`);
    expect(unreachableMessage(url, 'boom')).toBe(`cannot reach the control plane at ${url}: boom`);
  });
});
