import { serve, type ServerType } from '@hono/node-server';
import { Hono } from 'hono';
import { requestId } from 'hono/request-id';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AddressInfo } from 'node:net';
import type { AppEnv } from '../../functions/dataplane/ports.js';
import { bodyText, openStream } from '../../functions/api/http/node-io.js';

/**
 * The hot path's request and response I/O, both ways it runs: on Node through @hono/node-server (Node's own
 * request and response), and as a plain fetch handler (the web objects, as on Workers).
 */
function app(events: string[]) {
  const hono = new Hono<AppEnv>();
  hono.use('*', requestId());
  hono.onError((error, c) => c.json({ error: error.message }, error.message === 'too large' ? 413 : 500));
  hono.post('/echo', async (c) => c.text(await bodyText(c, 1024, () => new Error('too large'))));
  hono.get('/stream', (c) => {
    const chunks = Number(c.req.query('chunks') ?? 3);
    const sink = openStream(c, 200, { 'content-type': 'text/event-stream' }, () => events.push('gone'));
    void (async () => {
      for (let i = 0; i < chunks; i += 1) {
        await sink.write([`data: ${i}\n\n`]);
        await new Promise((r) => setTimeout(r, 20));
      }
      sink.end(['data: [DONE]\n\n']);
      events.push('ended');
    })();
    return sink.response;
  });
  return hono;
}

async function readAll(response: Response): Promise<string> {
  return await response.text();
}

describe('hot-path I/O on Node (node-server) and on the web objects', () => {
  const nodeEvents: string[] = [];
  const webEvents: string[] = [];
  let server: ServerType;
  let base: string;
  const web = app(webEvents);

  beforeAll(async () => {
    server = serve({ fetch: app(nodeEvents).fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise((r) => server.once('listening', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  it('streams every chunk, then the end, with the status, headers and request id', async () => {
    for (const response of [await fetch(`${base}/stream`), await web.request('/stream')]) {
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('text/event-stream');
      expect(response.headers.get('x-request-id')).toBeTruthy();
      expect(await readAll(response)).toBe('data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n');
    }
    expect(nodeEvents).toContain('ended');
    expect(webEvents).toContain('ended');
    expect([...nodeEvents, ...webEvents]).not.toContain('gone');
  });

  it('tells when the client leaves mid-stream', async () => {
    const controller = new AbortController();
    const response = await fetch(`${base}/stream?chunks=50`, { signal: controller.signal });
    const reader = response.body!.getReader();
    await reader.read();
    controller.abort();
    const webResponse = await web.request('/stream?chunks=50');
    const webReader = webResponse.body!.getReader();
    await webReader.read();
    await webReader.cancel();
    for (const events of [nodeEvents, webEvents]) {
      const deadline = Date.now() + 5_000;
      while (!events.includes('gone') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(events).toContain('gone');
    }
  });

  it('reads a body whole, and refuses one over the limit whether declared or streamed, still answering', async () => {
    const echoed = await fetch(`${base}/echo`, { method: 'POST', body: 'héllo' });
    expect(await echoed.text()).toBe('héllo');
    expect(await (await web.request('/echo', { method: 'POST', body: 'héllo' })).text()).toBe('héllo');
    expect((await fetch(`${base}/echo`, { method: 'POST', body: 'x'.repeat(2048) })).status).toBe(413);
    const chunked = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 8; i += 1) controller.enqueue(new Uint8Array(512).fill(120));
        controller.close();
      },
    });
    const streamed = await fetch(`${base}/echo`, { method: 'POST', body: chunked, duplex: 'half' } as RequestInit);
    expect(streamed.status).toBe(413);
    expect((await web.request('/echo', { method: 'POST', body: 'x'.repeat(2048) })).status).toBe(413);
  });
});
