import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { generateMachineKey } from '../../agent/state.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { enrollmentTokens, machines } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { NON_CANONICAL_KEYS, SMALL_ORDER_KEYS, weakJwk } from '../helpers/weak-keys.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';
import { TEST_INVENTORY } from '../helpers/machine.js';

const jwkOf = weakJwk;

async function enrollBody(token: string, name: string) {
  const key = await generateMachineKey();
  return JSON.stringify({ token, name, publicKey: key.publicJwk, inventory: TEST_INVENTORY });
}

function enroll(plane: TestPlane, body: string) {
  return fetch(`${plane.url}/agent/v1/enroll`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
}

async function machineCount(plane: TestPlane) {
  return (await plane.ports.store.db.select().from(machines)).length;
}

function enrollmentSuite(store: StoreKind) {
  let plane: TestPlane;
  beforeAll(async () => {
    plane = await startTestPlane({ store });
  });
  afterAll(async () => {
    await plane.stop();
  });

  const mint = (input: { name?: string; ttlSeconds?: number } = {}) =>
    createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, labels: { rack: 'a' }, ttlSeconds: input.ttlSeconds ?? 300, name: input.name },
    });

  it('enrolls once, stores only the hash and applies the token labels', async () => {
    const token = await mint({ name: 'node-a' });
    const response = await enroll(plane, await enrollBody(token.token, 'node-a'));
    expect(response.status).toBe(201);
    const body = (await response.json()) as { machineId: string; jwks: { keys: unknown[] } };
    expect(body.machineId).toMatch(/^mch_/);
    expect(body.jwks.keys.length).toBeGreaterThan(0);
    const [row] = await plane.ports.store.db.select().from(enrollmentTokens).where(eq(enrollmentTokens.id, token.id));
    expect(row!.tokenHash).not.toContain(token.token);
    expect(row!.tokenHash).toMatch(/^[0-9a-f]{64}$/);
    expect(row!.machineId).toBe(body.machineId);
    const [machine] = await plane.ports.store.db.select().from(machines).where(eq(machines.id, body.machineId));
    expect(machine!.labels).toEqual({ rack: 'a' });
  });

  it('rejects a token used twice in a row and creates no second machine', async () => {
    const token = await mint();
    expect((await enroll(plane, await enrollBody(token.token, 'twice-1'))).status).toBe(201);
    const before = await machineCount(plane);
    const second = await enroll(plane, await enrollBody(token.token, 'twice-2'));
    expect(second.status).toBe(409);
    expect(((await second.json()) as { error: { code: string } }).error.code).toBe('enrollment_token_used');
    expect(await machineCount(plane)).toBe(before);
  });

  it('lets exactly one of 20 concurrent uses of a token succeed', async () => {
    const token = await mint();
    const before = await machineCount(plane);
    const bodies = await Promise.all(Array.from({ length: 20 }, (_, i) => enrollBody(token.token, `race-${i}`)));
    const statuses = await Promise.all(bodies.map(async (body) => (await enroll(plane, body)).status));
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(19);
    expect(await machineCount(plane)).toBe(before + 1);
  });

  it('rejects an expired token', async () => {
    const token = await mint({ ttlSeconds: 10 });
    await plane.ports.store.db
      .update(enrollmentTokens)
      .set({ expiresAt: new Date(Date.now() - 60_000) })
      .where(eq(enrollmentTokens.id, token.id));
    const before = await machineCount(plane);
    const response = await enroll(plane, await enrollBody(token.token, 'late'));
    expect(response.status).toBe(401);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('enrollment_token_expired');
    expect(await machineCount(plane)).toBe(before);
  });

  it('rejects a token bound to another name, and leaves it usable by the right name', async () => {
    const token = await mint({ name: 'bound-x' });
    const wrong = await enroll(plane, await enrollBody(token.token, 'bound-y'));
    expect(wrong.status).toBe(403);
    expect(((await wrong.json()) as { error: { code: string } }).error.code).toBe('enrollment_name_mismatch');
    expect((await enroll(plane, await enrollBody(token.token, 'bound-x'))).status).toBe(201);
  });

  it('rejects an unknown token, a taken name, malformed JSON and an oversized body', async () => {
    expect((await enroll(plane, await enrollBody('lnxe_not-a-real-token-at-all', 'nobody'))).status).toBe(401);
    const token = await mint();
    const taken = await enroll(plane, await enrollBody(token.token, 'node-a'));
    expect(taken.status).toBe(409);
    expect(((await taken.json()) as { error: { code: string } }).error.code).toBe('machine_name_taken');
    // The failed enrollment rolled back: the token is still usable.
    expect((await enroll(plane, await enrollBody(token.token, 'node-b'))).status).toBe(201);
    const malformed = await enroll(plane, '{"token":');
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { error: { code: string; requestId: string } }).error).toMatchObject({ code: 'invalid_json' });
    const oversized = await enroll(plane, JSON.stringify({ pad: 'x'.repeat(plane.ports.config.agentMaxBodyBytes + 10) }));
    expect(oversized.status).toBe(413);
    const invalid = await enroll(plane, JSON.stringify({ token: 'x'.repeat(20), name: 'Bad Name!' }));
    expect(invalid.status).toBe(400);
    expect(((await invalid.json()) as { error: { code: string } }).error.code).toBe('validation_failed');
  });

  it('refuses each small-order public key and each non-canonical encoding with 400, consuming nothing', async () => {
    const before = await machineCount(plane);
    let i = 0;
    for (const hex of [...SMALL_ORDER_KEYS, ...NON_CANONICAL_KEYS]) {
      const token = await mint();
      const name = `weak-${++i}`;
      const response = await enroll(plane, JSON.stringify({ token: token.token, name, publicKey: jwkOf(hex), inventory: TEST_INVENTORY }));
      const body = (await response.json()) as { error: { code: string; details?: Array<{ path: string }> } };
      expect(response.status, `${hex}: ${JSON.stringify(body)}`).toBe(400);
      expect(body.error.code).toBe('validation_failed');
      expect(body.error.details?.map((d) => d.path)).toContain('publicKey.x');
      // The refusal consumed nothing: the same token enrolls a real key.
      expect((await enroll(plane, await enrollBody(token.token, name))).status).toBe(201);
    }
    expect(await machineCount(plane)).toBe(before + SMALL_ORDER_KEYS.length + NON_CANONICAL_KEYS.length);
  });

  it("takes a machine's labels from its token, never from the machine: declared labels are refused with 400", async () => {
    const token = await mint({ name: 'labelled' });
    const key = await generateMachineKey();
    const declared = await enroll(
      plane,
      JSON.stringify({ token: token.token, name: 'labelled', publicKey: key.publicJwk, inventory: TEST_INVENTORY, labels: { rack: 'b', gpu: 'h100' } }),
    );
    const body = (await declared.json()) as { error: { code: string; details?: Array<{ path: string }> } };
    expect(declared.status, JSON.stringify(body)).toBe(400);
    expect(body.error.code).toBe('validation_failed');
    expect(body.error.details?.map((d) => d.path)).toContain('labels');
    // An empty map (what the agent sends) is no declaration; the token's labels apply.
    const ok = await enroll(plane, JSON.stringify({ token: token.token, name: 'labelled', publicKey: key.publicJwk, inventory: TEST_INVENTORY, labels: {} }));
    expect(ok.status).toBe(201);
    const { machineId } = (await ok.json()) as { machineId: string };
    const [machine] = await plane.ports.store.db.select().from(machines).where(eq(machines.id, machineId));
    expect(machine!.labels).toEqual({ rack: 'a' });
  });

  it('requires an admin token to create enrollment tokens', async () => {
    const post = (headers: Record<string, string>) =>
      fetch(`${plane.url}/api/v1/enrollment-tokens`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: '{}' });
    expect((await post({})).status).toBe(401);
    expect((await post({ authorization: 'Bearer lnx_wrong' })).status).toBe(401);
    const ok = await plane.admin('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ name: 'via-api', ttlSeconds: 60 }) });
    expect(ok.status).toBe(201);
    const created = (await ok.json()) as { token: string; expiresAt: string };
    expect(created.token).toMatch(/^lnxe_/);
  });
}

describe('enrollment on PGlite', () => enrollmentSuite('pglite'));
describePg('enrollment on PostgreSQL', () => enrollmentSuite('pg'));
