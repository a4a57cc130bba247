import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import { SignJWT } from 'jose';
import { generateMachineKey } from '../../agent/state.js';
import { sha256Base64Url } from '../../shared/canonical.js';
import { ErrorEnvelope } from '../../shared/contracts/common.js';
import { RotateCredentialResponse } from '../../shared/contracts/enrollment.js';
import { createApiToken, ensureWorkspace } from '../../functions/services/api-tokens.js';
import { reconcileOnce } from '../../functions/controller/driver.js';
import { assignments, machineCredentials, machines, runtimeReports } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';
import { NON_CANONICAL_KEYS, SMALL_ORDER_KEYS, weakJwk } from '../helpers/weak-keys.js';
import { enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';

const HEARTBEAT = '/agent/v1/heartbeat';
const CREDENTIALS = '/agent/v1/credentials';

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/** The weak keys rotation must refuse, as the agent would send them. */
const WEAK_KEYS = [...SMALL_ORDER_KEYS, ...NON_CANONICAL_KEYS].map(weakJwk);

/** Asserts the shared error envelope and returns it. */
async function expectError(response: Response, status: number, code: string, reason?: string | RegExp) {
  expect(response.status).toBe(status);
  const { error } = ErrorEnvelope.parse(await response.json());
  expect(error.code).toBe(code);
  expect(error.message.length).toBeGreaterThan(0);
  expect(error.requestId).toBe(response.headers.get('x-request-id'));
  if (reason !== undefined) {
    const actual = (error.details as { reason?: string } | undefined)?.reason;
    if (typeof reason === 'string') expect(actual).toBe(reason);
    else expect(actual).toMatch(reason);
  }
  return error;
}

function suite(store: StoreKind) {
  let plane: TestPlane;
  let seq = 0;
  const unique = (prefix: string) => `${prefix}-${++seq}`;

  beforeAll(async () => {
    // Nothing here is about liveness: a machine primed by one heartbeat stays ready for the whole test even on
    // a loaded machine (the fast test timings would make it stale within a second).
    plane = await startTestPlane({ store, config: { heartbeatIntervalMs: 10_000, runtimeGraceMs: 10_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000 } });
  });
  afterAll(async () => {
    await plane.stop();
  });

  const db = () => plane.ports.store.db;

  /** Everything a rejected request must leave untouched. */
  async function snapshot(ids: string[]) {
    const rows = await db()
      .select({
        id: machines.id,
        lastHeartbeatAt: machines.lastHeartbeatAt,
        bootId: machines.bootId,
        lastSeq: machines.lastSeq,
        reportedStatus: machines.reportedStatus,
        reportedGen: machines.reportedGen,
        metrics: machines.metrics,
        revokedAt: machines.revokedAt,
        cordoned: machines.cordoned,
      })
      .from(machines)
      .where(inArray(machines.id, ids))
      .orderBy(machines.id);
    expect(rows).toHaveLength(ids.length);
    const reports = await db().select().from(runtimeReports).orderBy(runtimeReports.machineId, runtimeReports.assignmentId);
    const credentials = await db()
      .select({ id: machineCredentials.id, expiresAt: machineCredentials.expiresAt })
      .from(machineCredentials)
      .where(inArray(machineCredentials.machineId, ids))
      .orderBy(machineCredentials.id);
    return { rows, reports, credentials };
  }

  /** Sends `body` to `path` with exactly the given Authorization header (or none). */
  function send(method: string, path: string, body: string, authorization?: string, headers: Record<string, string> = {}) {
    return fetch(`${plane.url}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...(authorization === undefined ? {} : { authorization }), ...headers },
      body: method === 'GET' ? undefined : body,
    });
  }

  /** Enrolls a machine and lands one accepted heartbeat (seq 1), so rejections have state to leave alone. */
  async function primed(prefix: string, labels: Record<string, string> = {}): Promise<TestMachine> {
    const machine = await enrollTestMachine(plane, unique(prefix), labels);
    const response = await machine.request('POST', HEARTBEAT, heartbeatBody(machine, 1));
    expect(response.status).toBe(200);
    return machine;
  }

  /** The stored public key of a machine's enrollment credential. */
  async function publicX(machine: TestMachine): Promise<string> {
    const [row] = await db()
      .select({ publicKey: machineCredentials.publicKey })
      .from(machineCredentials)
      .where(eq(machineCredentials.id, machine.credentialId));
    return row!.publicKey.x;
  }

  /** Claims of a well-formed machine JWT for a heartbeat, for hand-built tokens. */
  async function claims(machine: TestMachine, body: string, times: { iat?: number; exp?: number } = {}) {
    const now = Math.floor(Date.now() / 1000);
    return {
      iss: machine.machineId,
      sub: machine.machineId,
      aud: machine.clusterId,
      iat: times.iat ?? now,
      exp: times.exp ?? now + 30,
      jti: crypto.randomUUID(),
      htm: 'POST',
      htp: HEARTBEAT,
      bdh: await sha256Base64Url(body),
    };
  }

  describe('machine JWT verification', () => {
    let a: TestMachine;
    let b: TestMachine;
    let next = 1;
    beforeAll(async () => {
      a = await primed('jwt-a');
      b = await primed('jwt-b');
    });
    // Every probe carries a sequence number the machine has not reported: were it accepted, last_seq would move.
    const body = () => JSON.stringify(heartbeatBody(a, ++next));

    async function expectRejected(authorization: string | undefined, sent: string, code: string, reason?: string | RegExp, status = 401) {
      const before = await snapshot([a.machineId, b.machineId]);
      await expectError(await send('POST', HEARTBEAT, sent, authorization), status, code, reason);
      expect(await snapshot([a.machineId, b.machineId])).toEqual(before);
    }

    it('accepts a correctly signed heartbeat (the control for every rejection below)', async () => {
      const text = body();
      const response = await send('POST', HEARTBEAT, text, `Bearer ${await a.sign('POST', HEARTBEAT, text)}`);
      expect(response.status).toBe(200);
      const [row] = await db().select({ lastSeq: machines.lastSeq }).from(machines).where(eq(machines.id, a.machineId));
      expect(row!.lastSeq).toBe(next);
    });

    it("rejects a token signed with another machine's key under this machine's kid", async () => {
      const text = body();
      await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, text, { key: b.key })}`, text, 'invalid_machine_token', 'signature');
    });

    it('rejects an expired token, naming the clock (clock_skew)', async () => {
      const text = body();
      const now = Math.floor(Date.now() / 1000);
      const jwt = await new SignJWT({ htm: 'POST', htp: HEARTBEAT, bdh: await sha256Base64Url(text) })
        .setProtectedHeader({ alg: 'EdDSA', kid: a.credentialId })
        .setIssuer(a.machineId)
        .setSubject(a.machineId)
        .setAudience(a.clusterId)
        .setIssuedAt(now - 120)
        .setExpirationTime(now - 90)
        .setJti(crypto.randomUUID())
        .sign(a.key);
      await expectRejected(`Bearer ${jwt}`, text, 'clock_skew', 'expired');
    });

    it('rejects a token that lives longer than 60 s, and accepts exactly 60 s', async () => {
      const long = body();
      await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, long, { lifetimeS: 61 })}`, long, 'invalid_machine_token', 'lifetime');
      const hour = body();
      await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, hour, { lifetimeS: 3600 })}`, hour, 'invalid_machine_token', 'lifetime');
      const edge = body();
      expect((await send('POST', HEARTBEAT, edge, `Bearer ${await a.sign('POST', HEARTBEAT, edge, { lifetimeS: 60 })}`)).status).toBe(200);
    });

    it('rejects a token issued in the future, naming the clock (clock_skew)', async () => {
      const text = body();
      const now = Math.floor(Date.now() / 1000);
      const jwt = await new SignJWT({ htm: 'POST', htp: HEARTBEAT, bdh: await sha256Base64Url(text) })
        .setProtectedHeader({ alg: 'EdDSA', kid: a.credentialId })
        .setIssuer(a.machineId)
        .setSubject(a.machineId)
        .setAudience(a.clusterId)
        .setIssuedAt(now + 40)
        .setExpirationTime(now + 60)
        .setJti(crypto.randomUUID())
        .sign(a.key);
      await expectRejected(`Bearer ${jwt}`, text, 'clock_skew', 'iat');
    });

    it('rejects the exact same Authorization header the second time (jti replay fence)', async () => {
      const text = body();
      const authorization = `Bearer ${await a.sign('POST', HEARTBEAT, text)}`;
      expect((await send('POST', HEARTBEAT, text, authorization)).status).toBe(200);
      await expectRejected(authorization, text, 'replayed_request', 'replayed');
    });

    it('rejects a body that does not match the signed digest', async () => {
      const signed = body();
      const sent = body();
      await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, signed)}`, sent, 'body_digest_mismatch', 'body_digest');
    });

    it('rejects an unsecured alg:none token', async () => {
      const text = body();
      const token = `${b64({ alg: 'none', kid: a.credentialId })}.${b64(await claims(a, text))}.`;
      await expectRejected(`Bearer ${token}`, text, 'invalid_machine_token', 'algorithm');
    });

    it("rejects HS256 keyed with the machine's public key", async () => {
      const x = await publicX(a);
      for (const secret of [Buffer.from(x, 'base64url'), new TextEncoder().encode(x)]) {
        const text = body();
        const jwt = await new SignJWT({ htm: 'POST', htp: HEARTBEAT, bdh: await sha256Base64Url(text) })
          .setProtectedHeader({ alg: 'HS256', kid: a.credentialId })
          .setIssuer(a.machineId)
          .setSubject(a.machineId)
          .setAudience(a.clusterId)
          .setIssuedAt()
          .setExpirationTime('30s')
          .setJti(crypto.randomUUID())
          .sign(new Uint8Array(secret));
        await expectRejected(`Bearer ${jwt}`, text, 'invalid_machine_token', 'algorithm');
      }
    });

    it('rejects a token issued for another method or path', async () => {
      const text = body();
      await expectRejected(`Bearer ${await a.sign('POST', CREDENTIALS, text)}`, text, 'invalid_machine_token', 'request_binding');
      await expectRejected(`Bearer ${await a.sign('GET', HEARTBEAT, text)}`, text, 'invalid_machine_token', 'request_binding');
      await expectRejected(`Bearer ${await a.sign('POST', '/agent/v1/heartbeat/', text)}`, text, 'invalid_machine_token', 'request_binding');
    });

    it('rejects a missing or non-Bearer Authorization header', async () => {
      await expectRejected(undefined, body(), 'unauthorized');
      const text = body();
      await expectRejected(`Basic ${await a.sign('POST', HEARTBEAT, text)}`, text, 'unauthorized');
      await expectRejected('Bearer not-a-jwt', body(), 'invalid_machine_token', 'malformed');
    });

    it('rejects an unknown kid and a token with no kid', async () => {
      const text = body();
      await expectRejected(
        `Bearer ${await a.sign('POST', HEARTBEAT, text, { kid: 'cred_0000000000000000000000000' })}`,
        text,
        'invalid_machine_token',
        'unknown_key',
      );
      const bare = body();
      const jwt = await new SignJWT({ htm: 'POST', htp: HEARTBEAT, bdh: await sha256Base64Url(bare) })
        .setProtectedHeader({ alg: 'EdDSA' })
        .setIssuer(a.machineId)
        .setSubject(a.machineId)
        .setAudience(a.clusterId)
        .setIssuedAt()
        .setExpirationTime('30s')
        .setJti(crypto.randomUUID())
        .sign(a.key);
      await expectRejected(`Bearer ${jwt}`, bare, 'invalid_machine_token', 'kid');
    });

    it('rejects a kid carrying a NUL byte, control characters or too many characters with 401, before the store', async () => {
      for (const kid of ['crd_\u0000', `${a.credentialId}\u0000`, 'crd_\u0001\u001f', 'x'.repeat(10_000)]) {
        const text = body();
        await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, text, { kid })}`, text, 'invalid_machine_token', 'kid');
      }
    });

    it('rejects a jti carrying a NUL byte or too many characters with 401 and records nothing', async () => {
      for (const jti of ['\u0000', `${crypto.randomUUID()}\u0000`, 'j'.repeat(10_000)]) {
        const text = body();
        const jwt = await new SignJWT({ htm: 'POST', htp: HEARTBEAT, bdh: await sha256Base64Url(text) })
          .setProtectedHeader({ alg: 'EdDSA', kid: a.credentialId })
          .setIssuer(a.machineId)
          .setSubject(a.machineId)
          .setAudience(a.clusterId)
          .setIssuedAt()
          .setExpirationTime('30s')
          .setJti(jti)
          .sign(a.key);
        await expectRejected(`Bearer ${jwt}`, text, 'invalid_machine_token', 'claim_jti');
      }
    });

    it('rejects a token for another cluster (audience)', async () => {
      const text = body();
      const c = await claims(a, text);
      const jwt = await new SignJWT({ htm: c.htm, htp: c.htp, bdh: c.bdh })
        .setProtectedHeader({ alg: 'EdDSA', kid: a.credentialId })
        .setIssuer(a.machineId)
        .setSubject(a.machineId)
        .setAudience('cluster-elsewhere')
        .setIssuedAt()
        .setExpirationTime('30s')
        .setJti(crypto.randomUUID())
        .sign(a.key);
      await expectRejected(`Bearer ${jwt}`, text, 'invalid_machine_token', 'claim_aud');
    });

    it('rejects A signing with its own key while claiming to be B', async () => {
      const text = JSON.stringify(heartbeatBody(b, 50));
      // A's kid: the key is A's, so iss/sub = B must not verify.
      await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, text, { machineId: b.machineId })}`, text, 'invalid_machine_token', /^claim_(iss|sub)$/);
      // B's kid with A's key: the signature cannot verify against B's stored key.
      await expectRejected(
        `Bearer ${await a.sign('POST', HEARTBEAT, text, { machineId: b.machineId, kid: b.credentialId })}`,
        text,
        'invalid_machine_token',
        'signature',
      );
    });

    it('answers 403 forbidden_machine when A reports with machineId = B', async () => {
      const text = JSON.stringify(heartbeatBody(b, 60));
      await expectRejected(`Bearer ${await a.sign('POST', HEARTBEAT, text)}`, text, 'forbidden_machine', undefined, 403);
    });
  });

  describe('cross-machine runtime reports', () => {
    it("does not let A create a runtime report under B's assignment", async () => {
      const owner = unique('owner');
      const a = await primed('rt-a');
      const b = await primed('rt-b', { owner });
      const deployment = await applyTestDeployment(plane, unique('only-b'), { owner });
      // B is ready (fresh heartbeat) and is the only machine with the label: it gets the replica.
      await reconcileOnce({ ctx: plane.systemCtx });
      const [assignment] = await db()
        .select()
        .from(assignments)
        .where(and(eq(assignments.deploymentId, deployment.id), isNull(assignments.removedAt)));
      expect(assignment?.machineId).toBe(b.machineId);
      const report = runtimeReport(assignment!.id, deployment.id);

      const before = await snapshot([a.machineId, b.machineId]);
      const stolen = await a.request('POST', HEARTBEAT, heartbeatBody(a, 2, { runtimes: [report] }));
      await expectError(stolen, 403, 'forbidden_machine');
      expect(await snapshot([a.machineId, b.machineId])).toEqual(before);
      expect(await db().select().from(runtimeReports).where(eq(runtimeReports.assignmentId, assignment!.id))).toEqual([]);

      // The owner may report it: the rejection above is about ownership, not the report's shape.
      expect((await b.request('POST', HEARTBEAT, heartbeatBody(b, 2, { runtimes: [report] }))).status).toBe(200);
      const rows = await db().select().from(runtimeReports).where(eq(runtimeReports.assignmentId, assignment!.id));
      expect(rows.map((r) => r.machineId)).toEqual([b.machineId]);

      // And A cannot overwrite B's existing report either (update path).
      const afterOwner = await snapshot([a.machineId, b.machineId]);
      await expectError(await a.request('POST', HEARTBEAT, heartbeatBody(a, 3, { runtimes: [{ ...report, state: 'failed' }] })), 403, 'forbidden_machine');
      expect(await snapshot([a.machineId, b.machineId])).toEqual(afterOwner);
    });
  });

  describe('heartbeat sequence', () => {
    it('rejects a sequence that does not increase within a boot, and accepts a new boot from 1', async () => {
      const m = await primed('seq');
      const before = await snapshot([m.machineId]);
      await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, 1)), 409, 'replayed_sequence');
      await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, 0, { status: 'degraded' })), 409, 'replayed_sequence');
      expect(await snapshot([m.machineId])).toEqual(before);

      expect((await m.request('POST', HEARTBEAT, heartbeatBody(m, 2))).status).toBe(200);
      const reboot = await m.request('POST', HEARTBEAT, heartbeatBody(m, 1, { bootId: 'boot-test-0002' }));
      expect(reboot.status).toBe(200);
      const [row] = await db().select().from(machines).where(eq(machines.id, m.machineId));
      expect(row).toMatchObject({ bootId: 'boot-test-0002', lastSeq: 1 });
      await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, 1, { bootId: 'boot-test-0002' })), 409, 'replayed_sequence');
    });
  });

  describe('revocation', () => {
    it('rejects the next heartbeat and credential rotation of a revoked machine', async () => {
      const m = await primed('revoked');
      const revoke = await plane.admin(`/api/v1/machines/${m.machineId}/revoke`, { method: 'POST', body: JSON.stringify({ reason: 'test' }) });
      expect(revoke.status).toBe(200);
      expect(((await revoke.json()) as { revokedAt: string | null; state: string }).revokedAt).not.toBeNull();

      const before = await snapshot([m.machineId]);
      await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, 2)), 401, 'machine_revoked', 'revoked');
      const next = await generateMachineKey();
      await expectError(await m.request('POST', CREDENTIALS, { publicKey: next.publicJwk }), 401, 'machine_revoked', 'revoked');
      expect(await snapshot([m.machineId])).toEqual(before);

      await expectError(await plane.admin(`/api/v1/machines/${m.machineId}/revoke`, { method: 'POST' }), 409, 'conflict');
    });
  });

  describe('malformed and oversized bodies', () => {
    const oversized = () => JSON.stringify({ pad: 'x'.repeat(plane.ports.config.agentMaxBodyBytes + 10) });

    it('answers 400 invalid_json and 413 payload_too_large on /agent/v1/enroll', async () => {
      const count = async () => (await db().select({ id: machines.id }).from(machines)).length;
      const before = await count();
      await expectError(await send('POST', '/agent/v1/enroll', '{"token":'), 400, 'invalid_json');
      await expectError(await send('POST', '/agent/v1/enroll', ''), 400, 'invalid_json');
      const big = await send('POST', '/agent/v1/enroll', oversized());
      expect(big.headers.get('connection')).toBe('close');
      await expectError(big, 413, 'payload_too_large');
      expect(await count()).toBe(before);
    });

    for (const path of [HEARTBEAT, CREDENTIALS]) {
      it(`answers 400 invalid_json and 413 payload_too_large on ${path}`, async () => {
        const m = await primed('body');
        const before = await snapshot([m.machineId]);
        // Correctly signed, so the request reaches the JSON parser.
        const malformed = '{"machineId":';
        await expectError(await send('POST', path, malformed, `Bearer ${await m.sign('POST', path, malformed)}`), 400, 'invalid_json');
        const big = oversized();
        const response = await send('POST', path, big, `Bearer ${await m.sign('POST', path, big)}`);
        expect(response.headers.get('connection')).toBe('close');
        await expectError(response, 413, 'payload_too_large');
        // Unsigned oversized bodies are refused before authentication reads them.
        await expectError(await send('POST', path, big), 413, 'payload_too_large');
        expect(await snapshot([m.machineId])).toEqual(before);
        // The connection close did not break the next request.
        expect((await m.request('POST', HEARTBEAT, heartbeatBody(m, 2))).status).toBe(200);
      });
    }
  });

  describe('integers past their columns', () => {
    it('answers 400 to a heartbeat whose seq, gen or runtime counts do not fit, and changes nothing', async () => {
      const m = await primed('int-overflow');
      const before = await snapshot([m.machineId]);
      let n = 10;
      const report = runtimeReport('asg_01J0000000000000000000000', 'dep_01J0000000000000000000000');
      for (const extra of [
        { seq: 2 ** 31 },
        { seq: 2 ** 53 + 2 },
        { gen: 2 ** 31 },
        { bootId: 'boot-test-0001', seq: 1e300 },
        { runtimes: [{ ...report, gen: 2 ** 31 }] },
        { runtimes: [{ ...report, restarts: 2 ** 31 }] },
        { runtimes: [{ ...report, activeInvocations: 2 ** 31 }] },
        { runtimes: [{ ...report, queueDepth: 2 ** 40 }] },
        { runtimes: [{ ...report, progress: { elapsedMs: 2 ** 53 + 2, timeoutMs: 1 } }] },
      ]) {
        await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, ++n, extra)), 400, 'validation_failed');
      }
      expect(await snapshot([m.machineId])).toEqual(before);
      // The largest values that do fit are accepted.
      expect((await m.request('POST', HEARTBEAT, heartbeatBody(m, 2 ** 31 - 1, { gen: 2 ** 31 - 1 }))).status).toBe(200);
    });

    it('answers 400 to NUL bytes in heartbeat strings, and changes nothing', async () => {
      const m = await primed('nul');
      const before = await snapshot([m.machineId]);
      for (const extra of [{ bootId: 'boot-\u0000-0001' }, { warmModels: ['sim\u0000chat'] }, { metrics: { 'load\u00001': 1 } }]) {
        await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, 2, extra)), 400, 'validation_failed');
      }
      expect(await snapshot([m.machineId])).toEqual(before);
    });
  });

  describe('management API authentication', () => {
    let m: TestMachine;
    let viewer: string;
    let operator: string;
    let foreign: string;
    beforeAll(async () => {
      m = await primed('mgmt');
      viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
      operator = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'operator', role: 'operator' } })).token;
      const otherWorkspace = await ensureWorkspace({ ctx: plane.systemCtx, input: { name: 'other' } });
      foreign = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: otherWorkspace, name: 'foreign admin', role: 'admin' } })).token;
    });

    type Route = { label: string; method: 'GET' | 'POST'; path: () => string; role: 'viewer' | 'operator' | 'admin'; body?: string };
    const routes: Route[] = [
      { label: 'POST /api/v1/enrollment-tokens', method: 'POST', path: () => '/api/v1/enrollment-tokens', role: 'admin', body: '{}' },
      { label: 'GET /api/v1/machines', method: 'GET', path: () => '/api/v1/machines', role: 'viewer' },
      { label: 'GET /api/v1/machines/{id}', method: 'GET', path: () => `/api/v1/machines/${m.machineId}`, role: 'viewer' },
      { label: 'POST /api/v1/machines/{id}/revoke', method: 'POST', path: () => `/api/v1/machines/${m.machineId}/revoke`, role: 'admin' },
      { label: 'POST /api/v1/machines/{id}/cordon', method: 'POST', path: () => `/api/v1/machines/${m.machineId}/cordon`, role: 'operator' },
      { label: 'POST /api/v1/machines/{id}/uncordon', method: 'POST', path: () => `/api/v1/machines/${m.machineId}/uncordon`, role: 'operator' },
    ];
    const call = (route: Route, token?: string) =>
      fetch(`${plane.url}${route.path()}`, {
        method: route.method,
        headers: { ...(route.body ? { 'content-type': 'application/json' } : {}), ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
        body: route.body,
      });
    const machineState = async () => {
      const [row] = await db().select({ revokedAt: machines.revokedAt, cordoned: machines.cordoned }).from(machines).where(eq(machines.id, m.machineId));
      return row;
    };

    for (const route of routes) {
      it(`${route.label}: no token and garbage token -> 401`, async () => {
        const before = await machineState();
        await expectError(await call(route), 401, 'unauthorized');
        await expectError(await call(route, 'lnx_garbage-token-that-does-not-exist'), 401, 'invalid_token');
        await expectError(await call(route, ''), 401, 'unauthorized');
        expect(await machineState()).toEqual(before);
      });
    }

    it('lets a viewer read but answers 403 on every operator and admin route', async () => {
      const before = await machineState();
      for (const route of routes) {
        const response = await call(route, viewer);
        if (route.role === 'viewer') expect(response.status).toBe(200);
        else await expectError(response, 403, 'forbidden');
      }
      expect(await machineState()).toEqual(before);
    });

    it('lets an operator cordon but not revoke or mint enrollment tokens', async () => {
      for (const route of routes) {
        const response = await call(route, operator);
        if (route.role === 'admin') await expectError(response, 403, 'forbidden');
        else expect(response.status).toBe(200);
      }
      // The last route run was uncordon: the machine ends as it began, unrevoked and uncordoned.
      expect(await machineState()).toEqual({ revokedAt: null, cordoned: false });
    });

    it("does not let another workspace's admin see or touch this workspace's machine", async () => {
      const list = await fetch(`${plane.url}/api/v1/machines`, { headers: { authorization: `Bearer ${foreign}` } });
      expect(list.status).toBe(200);
      const { data } = (await list.json()) as { data: Array<{ id: string }> };
      expect(data).toEqual([]);
      // The same list with this workspace's admin token does include it: the empty list above is isolation.
      const own = (await (await plane.admin('/api/v1/machines')).json()) as { data: Array<{ id: string }> };
      expect(own.data.map((d) => d.id)).toContain(m.machineId);

      for (const route of routes.filter((r) => r.path().includes(m.machineId))) {
        await expectError(await call(route, foreign), 404, 'not_found');
      }
      expect(await machineState()).toEqual({ revokedAt: null, cordoned: false });
    });
  });

  describe('credential rotation', () => {
    it('overlaps old and new keys, then refuses the old one once it expires', async () => {
      const m = await primed('rotate');
      const next = await generateMachineKey();
      const rotated = await m.request('POST', CREDENTIALS, { publicKey: next.publicJwk });
      expect(rotated.status).toBe(201);
      const { credentialId } = RotateCredentialResponse.parse(await rotated.json());
      expect(credentialId).not.toBe(m.credentialId);
      const rows = await db().select().from(machineCredentials).where(eq(machineCredentials.machineId, m.machineId));
      expect(rows.map((r) => r.id).sort()).toEqual([m.credentialId, credentialId].sort());
      expect(rows.find((r) => r.id === credentialId)!.publicKey).toEqual(next.publicJwk);

      const withNew = async (seqNo: number) => {
        const text = JSON.stringify(heartbeatBody(m, seqNo));
        return send('POST', HEARTBEAT, text, `Bearer ${await m.sign('POST', HEARTBEAT, text, { key: next.privateKey, kid: credentialId })}`);
      };
      expect((await m.request('POST', HEARTBEAT, heartbeatBody(m, 2))).status).toBe(200);
      expect((await withNew(3)).status).toBe(200);

      await db().update(machineCredentials).set({ expiresAt: sql`now() - interval '1 minute'` }).where(eq(machineCredentials.id, m.credentialId));
      const before = await snapshot([m.machineId]);
      await expectError(await m.request('POST', HEARTBEAT, heartbeatBody(m, 4)), 401, 'credential_expired', 'credential_expired');
      const another = await generateMachineKey();
      await expectError(await m.request('POST', CREDENTIALS, { publicKey: another.publicJwk }), 401, 'credential_expired', 'credential_expired');
      expect(await snapshot([m.machineId])).toEqual(before);
      expect((await withNew(4)).status).toBe(200);
    });

    it('refuses each small-order key and non-canonical encoding with 400 and adds no credential', async () => {
      const m = await primed('rotate-weak');
      const before = await snapshot([m.machineId]);
      for (const publicKey of WEAK_KEYS) {
        const response = await m.request('POST', CREDENTIALS, { publicKey });
        const error = await expectError(response, 400, 'validation_failed');
        expect((error.details as Array<{ path: string }>).map((d) => d.path)).toContain('publicKey.x');
      }
      expect(await snapshot([m.machineId])).toEqual(before);
    });

    it('rejects a malformed public key with 400 and adds no credential', async () => {
      const m = await primed('rotate-bad');
      const before = await snapshot([m.machineId]);
      const real = (await generateMachineKey()).publicJwk;
      for (const publicKey of [
        { kty: 'OKP', crv: 'Ed25519', x: 'too-short' },
        { kty: 'OKP', crv: 'X25519', x: real.x },
        { kty: 'RSA', n: 'abc', e: 'AQAB' },
        { ...real, x: `${real.x.slice(0, 42)}+` },
        'not-an-object',
      ]) {
        await expectError(await m.request('POST', CREDENTIALS, { publicKey }), 400, 'validation_failed');
      }
      await expectError(await m.request('POST', CREDENTIALS, {}), 400, 'validation_failed');
      expect(await snapshot([m.machineId])).toEqual(before);
    });
  });
}

describe('machine authentication on PGlite', () => suite('pglite'));
describePg('machine authentication on PostgreSQL', () => suite('pg'));
