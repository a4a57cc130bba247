import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startControlPlane, type RunningControlPlane } from '../../functions/hosts/node.js';
import { PeerAuth } from '../../functions/link/peer-auth.js';
import { PeerHolders } from '../../functions/link/peer-holders.js';
import { streamLeases } from '../../functions/store/schema/index.js';
import type { Invoke } from '../../shared/contracts/relay.js';
import { FAST_TEST_CONFIG } from '../helpers/fast-config.js';
import { enrollTestMachine } from '../helpers/machine.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/**
 * The peer channel (docs/security.md, "The peer channel"; third security review, I-1): a peer token is good for
 * the one request it was minted for, once, so that one seen on the wire is worthless; the peer listener is bounded as
 * the API's is (headers timeout, connection cap); and it serves HTTPS when given a certificate.
 */
describePg('the peer channel', () => {
  const MACHINE = 'mch_peer_test';
  let database: { url: string; drop(): Promise<void> };
  let plane: TestPlane;
  let peerPort: number;
  /** A caller as another instance of the cluster would be: it derives the same peer key from the store. */
  let caller: PeerAuth;

  beforeAll(async () => {
    database = await createTestDatabase();
    plane = await startTestPlane({ store: 'pg', databaseUrl: database.url, config: { headersTimeoutMs: 1_000, maxConnections: 4 } });
    peerPort = Number(new URL(plane.peerUrl!).port);
    caller = new PeerAuth('instance_caller', plane.ports.identity);
  });
  afterAll(async () => {
    await plane?.close();
    await database?.drop();
  });

  const send = (path: string, authorization: string, init: { method?: string; machine?: string; body?: string } = {}) =>
    fetch(`${plane.peerUrl}${path}`, {
      method: init.method ?? 'GET',
      headers: { authorization, 'x-lunanexa-machine': init.machine ?? MACHINE, 'content-type': 'application/json' },
      body: init.body,
    });

  it('refuses a captured peer request replayed (401), and a token bound to one request on another', async () => {
    const frames = '/peer/v1/agent/invocations/inv_1/frames';
    const captured = await caller.header(plane.ports.instanceId, { method: 'GET', path: frames, machineId: MACHINE });
    // Authenticated: answered as /agent/v1 would (this instance holds no link of that machine).
    const first = await send(frames, captured);
    expect(first.status).toBe(409);
    expect((await first.json()).error.code).toBe('no_stream');
    const replayed = await send(frames, captured);
    expect(replayed.status).toBe(401);
    expect((await replayed.json()).error.code).toBe('unauthorized');

    const bound = await caller.header(plane.ports.instanceId, { method: 'GET', path: frames, machineId: MACHINE });
    expect((await send('/peer/v1/agent/invocations/inv_2/frames', bound)).status).toBe(401);
    expect((await send(frames, bound, { method: 'POST', body: '' })).status).toBe(401);
    expect((await send(frames, bound, { machine: 'mch_other' })).status).toBe(401);
    // Another instance's token is not this one's.
    expect((await send(frames, await caller.header('instance_other', { method: 'GET', path: frames, machineId: MACHINE }))).status).toBe(401);
    // Refused before it was taken: still good for the request it was minted for, once.
    expect((await send(frames, bound)).status).toBe(409);

    const invoke = (invocationId: string): Invoke => ({
      invocationId,
      workloadId: 'wl_1',
      assignmentId: 'asg_1',
      path: '/v1/chat/completions',
      body: '{"model":"m","messages":[]}',
      deadline: Date.now() + 10_000,
      idempotencyKey: null,
      stream: false,
    });
    const forInvA = () => caller.header(plane.ports.instanceId, { method: 'POST', path: '/peer/v1/invoke', machineId: MACHINE }, 'inv_a');
    expect((await send('/peer/v1/invoke', await forInvA(), { method: 'POST', body: JSON.stringify(invoke('inv_b')) })).status).toBe(401);
    expect((await send('/peer/v1/invoke', await forInvA(), { method: 'POST', body: JSON.stringify(invoke('inv_a')) })).status).toBe(409);
  });

  /** What the server sent until it closed the connection, or null when it was still open after `ms`. */
  function ending(socket: Socket, ms: number): Promise<string | null> {
    let data = '';
    socket.on('data', (chunk) => (data += chunk));
    socket.on('error', () => {});
    return Promise.race([
      new Promise<string>((resolve) => socket.once('close', () => resolve(data))),
      new Promise<null>((resolve) => setTimeout(() => resolve(null), ms)),
    ]);
  }

  const open = () =>
    new Promise<Socket>((resolve, reject) => {
      const socket = connect(peerPort, '127.0.0.1', () => resolve(socket));
      socket.once('error', reject);
    });

  it('answers a trickled header on the peer port 408 after headersTimeoutMs, and caps its connections', async () => {
    const socket = await open();
    const ended = ending(socket, 6_000);
    socket.write('GET /peer/v1/agent/uplink HTTP/1.1\r\nHost: x\r\n');
    const trickle = setInterval(() => {
      if (!socket.destroyed) socket.write('X-a: b\r\n');
    }, 200);
    const data = await ended;
    clearInterval(trickle);
    socket.destroy();
    expect(data, 'the connection still open after 6 s').not.toBeNull();
    expect(data).toMatch(/^HTTP\/1\.1 408/);

    const held: Socket[] = [];
    try {
      for (let i = 0; i < 4; i++) held.push(await open());
      // Let the server count them.
      await new Promise((r) => setTimeout(r, 100));
      const extra = await open();
      const refused = await ending(extra, 2_000);
      extra.destroy();
      expect(refused, 'the fifth connection was kept').toBe('');
    } finally {
      for (const socket of held) socket.destroy();
    }
  });

  it('serves HTTPS with a certificate, and its callers check it against LUNANEXA_PEER_TLS_CA', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'lnx-peer-tls-'));
    let secure: RunningControlPlane | undefined;
    const holders: PeerHolders[] = [];
    try {
      // A throwaway self-signed certificate for the address the listener advertises.
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-addext',
          'subjectAltName=IP:127.0.0.1',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      );
      const cert = await readFile(join(dir, 'cert.pem'), 'utf8');
      const key = await readFile(join(dir, 'key.pem'), 'utf8');
      secure = await startControlPlane({
        port: 0,
        dataDir: join(dir, 'data'),
        databaseUrl: database.url,
        peer: { tls: { cert, key } },
        config: FAST_TEST_CONFIG,
        logger: pino({ level: 'silent' }),
      });
      expect(secure.peerUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      // The machine's link is held by the secure instance, as its stream lease says.
      const machine = await enrollTestMachine(plane, 'peer-tls');
      await plane.ports.store.db.insert(streamLeases).values({
        machineId: machine.machineId,
        instanceId: secure.ports.instanceId,
        connectionId: 'test',
        expiresAt: new Date(Date.now() + 60_000),
      });
      const principal = { machineId: machine.machineId, workspaceId: plane.workspaceId, credentialId: machine.credentialId, credentialExpiresAt: new Date() };
      const holdersWith = (ca?: string) => {
        const made = new PeerHolders({ instanceId: 'instance_caller', auth: caller, db: () => plane.ports.store.db, ca });
        holders.push(made);
        return made;
      };
      // Over TLS, authenticated, and answered as /agent/v1 would (the lease is the test's, not a live stream).
      expect(await holdersWith(cert).pipe(principal, 'GET', '/invocations/inv_1/frames', null)).toMatchObject({ status: 409 });
      await expect(holdersWith().pipe(principal, 'GET', '/invocations/inv_1/frames', null)).rejects.toThrow();
      await expect(fetch(secure.peerUrl!.replace('https:', 'http:'))).rejects.toThrow();
    } finally {
      for (const made of holders) await made.close();
      await secure?.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
