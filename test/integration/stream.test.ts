import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { generateMachineKey } from '../../agent/state.js';
import { verifyDesiredState } from '../../agent/link/desired.js';
import { ErrorEnvelope } from '../../shared/contracts/common.js';
import { EnrollResponse, type Jwks } from '../../shared/contracts/enrollment.js';
import { STREAM_PROTOCOL_VERSION, StreamEvents } from '../../shared/contracts/stream.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { reconcileOnce } from '../../functions/controller/driver.js';
import { machines, streamLeases } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';
import { TEST_INVENTORY, enrollTestMachine, heartbeatBody, type TestMachine } from '../helpers/machine.js';
import { SseReader } from '../helpers/sse.js';

const STREAM = '/agent/v1/stream';

interface OpenStream {
  response: Response;
  reader: SseReader;
  abort(): void;
}

function suite(store: StoreKind) {
  let plane: TestPlane;
  let jwks: Jwks;
  let seq = 0;
  const unique = (prefix: string) => `${prefix}-${++seq}`;
  const open: OpenStream[] = [];

  beforeAll(async () => {
    plane = await startTestPlane({ store, config: { streamPingTimeoutMs: 3_000 } });
    // The JWKS an agent pins is the one its enrollment answer carries.
    const token = await createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, name: 'jwks-probe', labels: {}, ttlSeconds: 60 },
    });
    const key = await generateMachineKey();
    const response = await fetch(`${plane.url}/agent/v1/enroll`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: token.token, name: 'jwks-probe', publicKey: key.publicJwk, inventory: TEST_INVENTORY }),
    });
    expect(response.status).toBe(201);
    jwks = EnrollResponse.parse(await response.json()).jwks;
    expect(jwks.keys.length).toBeGreaterThan(0);
  });
  afterEach(() => {
    for (const stream of open.splice(0)) stream.abort();
  });
  afterAll(async () => {
    await plane.stop();
  });

  const db = () => plane.ports.store.db;
  const keepAliveMs = () => plane.ports.config.streamKeepAliveMs;

  async function openStream(machine: TestMachine, headers: Record<string, string> = {}): Promise<OpenStream> {
    const controller = new AbortController();
    const response = await fetch(`${plane.url}${STREAM}`, {
      headers: { authorization: `Bearer ${await machine.sign('GET', STREAM, '')}`, accept: 'text/event-stream', ...headers },
      signal: controller.signal,
    });
    // A refused stream keeps its body for the error envelope; the reader then sees an ended stream.
    const body = response.ok ? response.body! : new ReadableStream<Uint8Array>({ start: (c) => c.close() });
    const stream: OpenStream = { response, reader: new SseReader(body), abort: () => controller.abort() };
    open.push(stream);
    return stream;
  }

  /** Reads `hello` then the first `desired`, checking both against the catalogue. */
  async function handshake(stream: OpenStream, machine: TestMachine) {
    const hello = await stream.reader.nextEvent(5_000);
    expect(hello?.event).toBe('hello');
    const helloData = StreamEvents.hello.parse(JSON.parse(hello!.data));
    expect(helloData).toMatchObject({ protocol: STREAM_PROTOCOL_VERSION, machineId: machine.machineId, keepAliveMs: keepAliveMs() });
    const desired = await stream.reader.nextEvent(5_000);
    expect(desired?.event).toBe('desired');
    const { jws } = StreamEvents.desired.parse(JSON.parse(desired!.data));
    return { hello: helloData, desired, jws };
  }

  const verify = (machine: TestMachine, jws: string, heldGen = 0) =>
    verifyDesiredState({ jws, jwks, machineId: machine.machineId, clusterId: machine.clusterId, heldGen });

  async function lease(machineId: string) {
    const [row] = await db().select().from(streamLeases).where(eq(streamLeases.machineId, machineId));
    return row;
  }

  async function desiredGen(machineId: string) {
    const [row] = await db().select({ desiredGen: machines.desiredGen }).from(machines).where(eq(machines.id, machineId));
    return row!.desiredGen;
  }

  it('answers with no-buffering SSE headers, then hello and a desired state that verifies against the pinned JWKS', async () => {
    const m = await enrollTestMachine(plane, unique('hello'));
    const stream = await openStream(m);
    expect(stream.response.status).toBe(200);
    expect(stream.response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(stream.response.headers.get('cache-control')).toBe('no-cache, no-transform');
    expect(stream.response.headers.get('x-accel-buffering')).toBe('no');

    const { desired, jws } = await handshake(stream, m);
    const verdict = await verify(m, jws);
    expect(verdict.accepted).toBe(true);
    if (!verdict.accepted) return;
    const gen = await desiredGen(m.machineId);
    expect(verdict.desired.sub).toBe(m.machineId);
    expect(verdict.desired.gen).toBe(gen);
    expect(desired!.id).toBe(`desired-${gen}`);
    expect(verdict.desired.exp).toBeGreaterThan(Date.now() / 1000);
    // Signed for this machine only: another machine's agent refuses it.
    const other = await enrollTestMachine(plane, unique('other'));
    expect((await verify(other, jws)).accepted).toBe(false);
  });

  it('sends comment keep-alives within three times the keep-alive interval (each waits for a lease renewal)', async () => {
    const m = await enrollTestMachine(plane, unique('keepalive'));
    const stream = await openStream(m);
    await handshake(stream, m);
    let last = Date.now();
    for (let i = 0; i < 3; i++) {
      const comment = await stream.reader.nextComment(3 * keepAliveMs());
      expect(comment?.text).toBe('keep-alive');
      expect(comment!.at - last).toBeLessThanOrEqual(3 * keepAliveMs());
      last = comment!.at;
    }
  });

  it('holds a stream lease for this instance while attached and drops it when the client goes away', async () => {
    const m = await enrollTestMachine(plane, unique('lease'));
    expect(await lease(m.machineId)).toBeUndefined();
    const stream = await openStream(m);
    const { hello } = await handshake(stream, m);
    const held = await lease(m.machineId);
    expect(held).toMatchObject({ instanceId: plane.ports.instanceId, connectionId: hello.connectionId });
    expect(held!.expiresAt.getTime()).toBeGreaterThan(Date.now());
    const attached = (await (await plane.admin(`/api/v1/machines/${m.machineId}`)).json()) as { streamAttached: boolean };
    expect(attached.streamAttached).toBe(true);

    stream.abort();
    await waitFor(async () => (await lease(m.machineId)) === undefined, { timeoutMs: 5_000, what: 'the stream lease to be dropped' });
    const detached = (await (await plane.admin(`/api/v1/machines/${m.machineId}`)).json()) as { streamAttached: boolean };
    expect(detached.streamAttached).toBe(false);
  });

  it('pushes a newer desired state on the open stream when the assignments change', async () => {
    const owner = unique('owner');
    const m = await enrollTestMachine(plane, unique('change'), { owner });
    const stream = await openStream(m);
    const first = await handshake(stream, m);
    const firstVerdict = await verify(m, first.jws);
    expect(firstVerdict.accepted && firstVerdict.desired.assignments).toEqual([]);
    const firstGen = firstVerdict.accepted ? firstVerdict.desired.gen : -1;

    // Placement needs a ready machine: a fresh heartbeat first.
    expect((await m.request('POST', '/agent/v1/heartbeat', heartbeatBody(m, 1))).status).toBe(200);
    const deployment = await applyTestDeployment(plane, unique('stream-deploy'), { owner });
    await reconcileOnce({ ctx: plane.systemCtx });

    const next = await stream.reader.nextEvent(5_000);
    expect(next?.event).toBe('desired');
    const { jws } = StreamEvents.desired.parse(JSON.parse(next!.data));
    const verdict = await verify(m, jws, firstGen);
    expect(verdict.accepted).toBe(true);
    if (!verdict.accepted) return;
    expect(verdict.desired.gen).toBeGreaterThan(firstGen);
    expect(verdict.desired.gen).toBe(await desiredGen(m.machineId));
    expect(next!.id).toBe(`desired-${verdict.desired.gen}`);
    expect(verdict.desired.assignments.map((a) => a.deploymentId)).toEqual([deployment.id]);
  });

  it('refuses a Last-Event-ID it never issued and accepts one it did', async () => {
    const m = await enrollTestMachine(plane, unique('last-event'));
    for (const bad of ['garbage', 'desired-', 'desired-abc', 'desired-1234567890123', 'invoke-3']) {
      const refused = await openStream(m, { 'last-event-id': bad });
      expect(refused.response.status).toBe(400);
      const { error } = ErrorEnvelope.parse(await refused.response.json());
      expect(error.code).toBe('bad_request');
      expect(error.requestId).toBe(refused.response.headers.get('x-request-id'));
    }
    expect(await lease(m.machineId)).toBeUndefined();

    const accepted = await openStream(m, { 'last-event-id': 'desired-3' });
    expect(accepted.response.status).toBe(200);
    // Level-triggered: the full desired state is sent on connect whatever the client last saw.
    const { jws } = await handshake(accepted, m);
    expect((await verify(m, jws)).accepted).toBe(true);
  });

  it('sends revoked and ends the stream within 2 s of a revocation', async () => {
    const m = await enrollTestMachine(plane, unique('revoke'));
    const stream = await openStream(m);
    await handshake(stream, m);
    const revokedAt = Date.now();
    const response = await plane.admin(`/api/v1/machines/${m.machineId}/revoke`, { method: 'POST', body: JSON.stringify({ reason: 'stolen laptop' }) });
    expect(response.status).toBe(200);

    const event = await stream.reader.nextEvent(2_000);
    expect(event?.event).toBe('revoked');
    expect(StreamEvents.revoked.parse(JSON.parse(event!.data)).reason).toBe('stolen laptop');
    expect(await stream.reader.waitForEnd(Math.max(1, revokedAt + 2_000 - Date.now()))).toBe(true);
    expect(stream.reader.endedAt! - revokedAt).toBeLessThanOrEqual(2_000);
    expect(await lease(m.machineId)).toBeUndefined();

    const again = await openStream(m);
    expect(again.response.status).toBe(401);
    expect(ErrorEnvelope.parse(await again.response.json()).error.code).toBe('machine_revoked');
  });

  it('pings the agent: a machine that stops answering leaves routing within the ping timeout, answering keeps it', async () => {
    const m = await enrollTestMachine(plane, unique('ping'));
    const other = await enrollTestMachine(plane, unique('ping-other'));
    const stream = await openStream(m);
    const { hello } = await handshake(stream, m);
    const attached = async () => ((await (await plane.admin(`/api/v1/machines/${m.machineId}`)).json()) as { streamAttached: boolean }).streamAttached;
    const pong = (machine: TestMachine, connectionId: string, seq: number) => machine.request('POST', '/agent/v1/pong', { connectionId, seq });

    // Answered pings keep the link for several timeouts.
    const timeout = plane.ports.config.streamPingTimeoutMs;
    const answerUntil = Date.now() + 2 * timeout;
    while (Date.now() < answerUntil) {
      const ping = await stream.reader.next(5_000);
      if (ping?.kind !== 'event' || ping.event !== 'ping') continue;
      const answered = await pong(m, hello.connectionId, StreamEvents.ping.parse(JSON.parse(ping.data)).seq);
      expect(await answered.json()).toEqual({ answered: true });
    }
    expect(await attached()).toBe(true);

    // Another machine cannot answer for it (it names a connection that is not its own: nothing is answered).
    expect(await (await pong(other, hello.connectionId, 1)).json()).toEqual({ answered: false });
    const bad = await pong(m, '', 1);
    expect(bad.status).toBe(400);

    // Silence: detached within the timeout, and the stream closed (what it carried fails and is retried elsewhere).
    const silentFrom = Date.now();
    await waitFor(async () => !(await attached()), { timeoutMs: timeout + 5_000, what: 'the silent machine to be detached' });
    expect(Date.now() - silentFrom).toBeGreaterThanOrEqual(timeout - 1_000);
    expect(await stream.reader.waitForEnd(plane.ports.config.streamPingMs + 5_000)).toBe(true);
    // An answer for the closed stream changes nothing: the agent must reconnect.
    expect(await (await pong(m, hello.connectionId, 99)).json()).toEqual({ answered: false });
    expect(await attached()).toBe(false);
  });

  it('lets a second stream of the same machine take over the lease and closes the first at its next keep-alive', async () => {
    const m = await enrollTestMachine(plane, unique('takeover'));
    const first = await openStream(m);
    const one = await handshake(first, m);
    expect((await lease(m.machineId))?.connectionId).toBe(one.hello.connectionId);

    const second = await openStream(m);
    const two = await handshake(second, m);
    expect(two.hello.connectionId).not.toBe(one.hello.connectionId);
    expect(await lease(m.machineId)).toMatchObject({ connectionId: two.hello.connectionId, instanceId: plane.ports.instanceId });

    // The first notices at its next lease renewal (one keep-alive), with slack for a slow database.
    expect(await first.reader.waitForEnd(2 * keepAliveMs() + 1_000)).toBe(true);
    // Its detach must not drop the lease the second connection now holds.
    expect((await lease(m.machineId))?.connectionId).toBe(two.hello.connectionId);
    const comment = await second.reader.nextComment(2 * keepAliveMs());
    expect(comment?.text).toBe('keep-alive');
    expect(second.reader.endedAt).toBeNull();
    expect((await lease(m.machineId))?.connectionId).toBe(two.hello.connectionId);
  });
}

describe('agent stream on PGlite', () => suite('pglite'));
describePg('agent stream on PostgreSQL', () => suite('pg'));
