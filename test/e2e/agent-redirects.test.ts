import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { enrollAgent } from '../../agent/enroll.js';
import { createSignedClient } from '../../agent/link/http.js';
import { openStreamLink } from '../../agent/link/stream.js';
import { generateMachineKey } from '../../agent/state.js';
import { HeartbeatResponse } from '../../shared/contracts/heartbeat.js';

/** A local HTTP server; `handle` answers every request. */
async function serve(handle: (req: IncomingMessage, res: import('node:http').ServerResponse) => void): Promise<{ server: Server; url: string }> {
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return { server, url: `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}` };
}

/**
 * Agent requests never follow redirects: a control plane (or whatever answers in its place) that says 307 does not
 * get the agent to send its signed request, or its enrollment token, anywhere else.
 */
describe('agent requests never follow a redirect', () => {
  let elsewhere: { server: Server; url: string };
  let redirecting: { server: Server; url: string };
  /** What reached the server the redirect points at. */
  const received: string[] = [];
  let redirected = 0;
  let dir: string;

  beforeAll(async () => {
    elsewhere = await serve((req, res) => {
      received.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ accepted: true, desiredGen: 0, heartbeatIntervalMs: 20_000 }));
    });
    redirecting = await serve((req, res) => {
      redirected += 1;
      // 307 keeps the method and the body: followed, it would replay them at the other server.
      res.writeHead(307, { location: `${elsewhere.url}${req.url}` });
      res.end();
    });
    dir = await mkdtemp(join(tmpdir(), 'lnx-redirect-'));
  });
  afterAll(async () => {
    await new Promise((resolve) => elsewhere.server.close(resolve));
    await new Promise((resolve) => redirecting.server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    received.length = 0;
    redirected = 0;
  });

  it('a signed request gets a redirect_refused failure, and the other server receives nothing', async () => {
    const key = await generateMachineKey();
    const client = createSignedClient({
      baseUrl: redirecting.url,
      credentials: () => ({ machineId: 'mch_1', clusterId: 'cls_1', credentialId: 'cred_1', key: key.privateKey }),
      dispatcher: new Agent(),
    });
    const result = await client.request('POST', '/agent/v1/heartbeat', { machineId: 'mch_1' }, HeartbeatResponse);
    expect(result).toEqual({ success: false, status: 307, error: { code: 'redirect_refused', message: expect.stringContaining('never follow redirects') } });
    expect(redirected).toBe(1);
    expect(received).toEqual([]);
  });

  it('enrollment fails and its token goes nowhere else', async () => {
    await expect(enrollAgent({ url: redirecting.url, token: 'lnxe_redirect-test-token', name: 'redirected', stateDir: join(dir, 'state') })).rejects.toThrow(
      /^enrollment failed: redirect_refused: control plane answered 307/,
    );
    expect(redirected).toBe(1);
    expect(received).toEqual([]);
  });

  it('the stream treats a redirect as an error, reconnects to the control plane only, and the other server receives nothing', async () => {
    const key = await generateMachineKey();
    const client = createSignedClient({
      baseUrl: redirecting.url,
      credentials: () => ({ machineId: 'mch_1', clusterId: 'cls_1', credentialId: 'cred_1', key: key.privateKey }),
      dispatcher: new Agent(),
    });
    const closed: string[] = [];
    const link = openStreamLink({
      baseUrl: redirecting.url,
      dispatcher: new Agent(),
      signedHeaders: client.signedHeaders,
      onEvent: () => {},
      onMalformed: () => {},
      onFatal: () => {},
      onState: (state, detail) => {
        if (state === 'closed') closed.push(detail ?? '');
      },
    });
    try {
      const deadline = Date.now() + 5_000;
      while (redirected < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(redirected).toBeGreaterThanOrEqual(2);
      expect(closed[0]).toBe('stream error (HTTP 307)');
      expect(link.isOpen()).toBe(false);
    } finally {
      link.close();
    }
    expect(received).toEqual([]);
  });
});
