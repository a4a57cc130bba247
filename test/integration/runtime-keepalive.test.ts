import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { RuntimeHttp } from '../../agent/runtimes/runtime-http.js';

const IDLE_MS = 300;
const BUSY_MS = 40;

/**
 * A runtime that drops a connection idle for IDLE_MS, as uvicorn (vLLM) does after 5 s, and sends no
 * `Keep-Alive: timeout=` hint, as uvicorn sends none. It is busy for the last BUSY_MS before an idle close falls
 * due, as a loaded runtime's event loop is: a request that arrives then is still unread when the connection
 * closes, and the client gets a reset instead of an answer. It times idleness itself because Node's own
 * keepAliveTimeout closes a second late on recent versions and on time on older ones, and it runs in a process
 * of its own so that its busy spells do not stall the client.
 */
const RUNTIME = `
const { createServer } = require('node:http');
const server = createServer((req, res) => {
  clearTimeout(req.socket.idle);
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ echo: Buffer.concat(chunks).toString() }));
  });
  res.on('finish', () => {
    const due = performance.now() + ${IDLE_MS};
    req.socket.idle = setTimeout(() => {
      while (performance.now() < due);
      req.socket.destroy();
    }, ${IDLE_MS - BUSY_MS});
  });
});
server.keepAliveTimeout = 0;
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

const children: ChildProcess[] = [];
const servers: Server[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    ),
  );
});

async function runtimeProcess(): Promise<string> {
  const child = spawn(process.execPath, ['-e', RUNTIME], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  const port = await new Promise<string>((resolve, reject) => {
    child.stdout!.once('data', (data: Buffer) => resolve(data.toString().trim()));
    child.once('exit', (code) => reject(new Error(`the runtime exited with ${code}`)));
  });
  return `http://127.0.0.1:${port}`;
}

describe('runtime connections the runtime closes as idle', () => {
  it('answer requests sent just before and just after the runtime closed their connection', async () => {
    const url = await runtimeProcess();
    const http = new RuntimeHttp();
    const failures: string[] = [];
    let sent = 0;
    const batch = () =>
      Promise.all(
        // As many at once as it takes to keep several connections in the pool.
        Array.from({ length: 8 }, async () => {
          const body = JSON.stringify({ request: (sent += 1) });
          try {
            const response = await http.request(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
            expect(await response.body.json()).toEqual({ echo: body });
          } catch (error) {
            failures.push(`${(error as { code?: string }).code ?? ''} ${(error as Error).message}`);
          }
        }),
      );
    await batch();
    // Idle gaps from well before the runtime's busy spell to past its close: those within the spell race it.
    for (let gap = IDLE_MS - BUSY_MS - 15; gap <= IDLE_MS + 15; gap += 5) {
      await sleep(gap);
      await batch();
    }
    expect(failures).toEqual([]);
  });

  it('are not retried once an answer began, nor when the caller gave up', async () => {
    let requests = 0;
    const server = createServer((req, res) => {
      requests += 1;
      if (req.url === '/broken') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: 1\n\n', () => req.socket.destroy());
      }
      // Anything else is never answered: the caller gives up first.
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const http = new RuntimeHttp();

    const broken = await http.request(`${url}/broken`, { method: 'POST', body: '{}' });
    await expect(broken.body.text()).rejects.toThrow();
    expect(requests).toBe(1);

    await expect(http.request(`${url}/slow`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(100) })).rejects.toThrow();
    await sleep(100);
    expect(requests).toBe(2);
  });
});
