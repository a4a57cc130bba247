import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateMachineKey } from '../../agent/state.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { auditEvents } from '../../functions/store/schema/index.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { TEST_INVENTORY } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * Low findings of the second security review, each on both stores (their fixes changed the schema):
 * an Idempotency-Key belongs to the token that sent it, not to the workspace (L1); enrollment tokens can be listed
 * without their secrets and revoked (L9).
 */

interface ErrorBody {
  error: { code: string | null; message: string };
}

function suite(store: StoreKind) {
  let plane: TestPlane;
  let victim: { id: string; token: string };
  let attacker: { id: string; token: string };
  let viewer: string;
  let operator: string;

  beforeAll(async () => {
    plane = await startTestPlane({ store });
    const ctx = plane.systemCtx;
    const workspaceId = plane.workspaceId;
    victim = await createApiToken({ ctx, input: { workspaceId, name: 'victim', role: 'inference' } });
    // Allow-listed to one model, as in the report: the key is all it shares with the victim.
    attacker = await createApiToken({ ctx, input: { workspaceId, name: 'attacker', role: 'inference', models: ['lows-other'] } });
    viewer = (await createApiToken({ ctx, input: { workspaceId, name: 'lows viewer', role: 'viewer' } })).token;
    operator = (await createApiToken({ ctx, input: { workspaceId, name: 'lows operator', role: 'operator' } })).token;
    // No machine can take either: each request fails at once (503), after its Idempotency-Key was recorded.
    await applyTestDeployment(plane, 'lows-model', { pool: 'none-such' });
    await applyTestDeployment(plane, 'lows-other', { pool: 'none-such' });
    await waitFor(async () => {
      await plane.ports.dataPlane.routing.refresh();
      return ['lows-model', 'lows-other'].every((name) => plane.ports.dataPlane.routing.resolve(plane.workspaceId, name) !== undefined);
    });
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  describe('L1: an Idempotency-Key is scoped to the token and the key', () => {
    const chat = (token: string, model: string, key: string) =>
      fetch(`${plane.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
      });

    it("another token's request with the same key is its own: it learns nothing of the victim's workload", async () => {
      const first = await chat(victim.token, 'lows-model', 'order-41');
      const firstText = await first.text();
      expect(first.status, firstText).toBe(503);
      const workloadId = first.headers.get('x-lunanexa-workload-id');

      const squat = await chat(attacker.token, 'lows-other', 'order-41');
      const squatText = await squat.text();
      expect(squat.status, squatText).toBe(503);
      expect((JSON.parse(squatText) as ErrorBody).error.code).toBe('no_replica_available');
      if (workloadId) expect(squatText).not.toContain(workloadId);
      expect(squatText).not.toMatch(/wkl_/);

      // The victim's own key still never executes twice.
      const again = await chat(victim.token, 'lows-model', 'order-41');
      const againText = await again.text();
      expect(again.status, againText).toBe(409);
      expect((JSON.parse(againText) as ErrorBody).error.code).toBe('idempotency_key_reused');
    });

    it("a key another token claimed first does not refuse the victim's request", async () => {
      const claimed = await chat(attacker.token, 'lows-other', 'order-42');
      expect(claimed.status, await claimed.text()).toBe(503);
      const victims = await chat(victim.token, 'lows-model', 'order-42');
      const text = await victims.text();
      expect(victims.status, text).toBe(503);
      expect((JSON.parse(text) as ErrorBody).error.code).toBe('no_replica_available');
    });
  });

  describe('L9: enrollment tokens are listed (never their secrets) and revoked', () => {
    interface EnrollmentTokenView {
      id: string;
      name: string | null;
      labels: Record<string, string>;
      state: string;
      revokedAt: string | null;
      usedAt: string | null;
      machineId: string | null;
    }
    const enroll = async (token: string, name: string) => {
      const key = await generateMachineKey();
      return fetch(`${plane.url}/agent/v1/enroll`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ token, name, publicKey: key.publicJwk, inventory: TEST_INVENTORY }),
      });
    };
    const mint = (name?: string) =>
      createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name, labels: { rack: 'leak' }, ttlSeconds: 600 } });
    const list = async (): Promise<EnrollmentTokenView[]> => {
      const response = await plane.admin('/api/v1/enrollment-tokens');
      const text = await response.text();
      expect(response.status, text).toBe(200);
      return (JSON.parse(text) as { data: EnrollmentTokenView[] }).data;
    };

    it('lists the workspace’s enrollment tokens with their state, never a secret or hash', async () => {
      const open = await mint('lows-open');
      const used = await mint('lows-used');
      expect((await enroll(used.token, 'lows-used')).status).toBe(201);
      const response = await plane.admin('/api/v1/enrollment-tokens');
      const text = await response.text();
      expect(response.status, text).toBe(200);
      expect(text).not.toContain(open.token);
      expect(text).not.toContain(used.token);
      expect(text).not.toMatch(/lnxe_|tokenHash|token_hash|"token"/);
      const listed = (JSON.parse(text) as { data: EnrollmentTokenView[] }).data;
      expect(listed.find((t) => t.id === open.id)).toMatchObject({
        name: 'lows-open',
        labels: { rack: 'leak' },
        state: 'active',
        revokedAt: null,
        usedAt: null,
      });
      expect(listed.find((t) => t.id === used.id)).toMatchObject({ name: 'lows-used', state: 'used', machineId: expect.stringMatching(/^mch_/) });
    });

    it('revokes one: it cannot enroll afterwards, the revocation is audited, and a second revocation is 409', async () => {
      const token = await mint('lows-revoked');
      const revoked = await plane.admin(`/api/v1/enrollment-tokens/${token.id}`, { method: 'DELETE' });
      const text = await revoked.text();
      expect(revoked.status, text).toBe(200);
      expect(JSON.parse(text)).toMatchObject({ id: token.id, state: 'revoked', revokedAt: expect.any(String) });
      expect(text).not.toContain(token.token);

      const refused = await enroll(token.token, 'lows-revoked');
      const refusedText = await refused.text();
      expect(refused.status, refusedText).toBe(401);
      expect((JSON.parse(refusedText) as ErrorBody).error.code).toBe('enrollment_token_revoked');
      expect((await list()).find((t) => t.id === token.id)).toMatchObject({ state: 'revoked', machineId: null });

      const audited = await plane.ports.store.db
        .select()
        .from(auditEvents)
        .where(and(eq(auditEvents.action, 'enrollment_token.revoke'), eq(auditEvents.target, token.id)));
      expect(audited).toHaveLength(1);

      const twice = await plane.admin(`/api/v1/enrollment-tokens/${token.id}`, { method: 'DELETE' });
      expect(twice.status).toBe(409);
    });

    it('refuses to revoke a used token (revoke its machine), an unknown one, or for a role below admin', async () => {
      const used = await mint('lows-used-2');
      expect((await enroll(used.token, 'lows-used-2')).status).toBe(201);
      const usedAnswer = await plane.admin(`/api/v1/enrollment-tokens/${used.id}`, { method: 'DELETE' });
      expect(usedAnswer.status, await usedAnswer.text()).toBe(409);
      expect((await plane.admin('/api/v1/enrollment-tokens/enr_01J00000000000000000000000', { method: 'DELETE' })).status).toBe(404);

      const open = await mint('lows-guarded');
      for (const token of [viewer, operator]) {
        const headers = { authorization: `Bearer ${token}` };
        expect((await fetch(`${plane.url}/api/v1/enrollment-tokens`, { headers })).status).toBe(403);
        expect((await fetch(`${plane.url}/api/v1/enrollment-tokens/${open.id}`, { method: 'DELETE', headers })).status).toBe(403);
      }
      // Refused calls changed nothing: the token still enrolls.
      expect((await enroll(open.token, 'lows-guarded')).status).toBe(201);
    });
  });
}

describe('security review 2, low findings, on PGlite', () => suite('pglite'));
describePg('security review 2, low findings, on PostgreSQL', () => suite('pg'));
