import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditEvents } from '../../functions/store/schema/index.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/**
 * The second security review's informational findings that the API and the console answer: a runtime secret's write tells
 * nothing about what was stored (I-3), a workspace's token list names no other workspace's token (I-6), and the
 * console's origin check compares the scheme too (I-9).
 */
describe('security review 2, infos', () => {
  let plane: TestPlane;
  beforeAll(async () => {
    // As behind a TLS-terminating proxy whose origin the operator names.
    plane = await startTestPlane({ store: 'pglite', config: { publicUrl: 'https://console.example' } });
  });
  afterAll(async () => await plane?.stop());

  const put = async (value: string) => {
    const answer = await plane.admin('/api/v1/runtime-secrets/hf-token', { method: 'PUT', body: JSON.stringify({ value }) });
    expect(answer.status).toBe(200);
    return (await answer.json()) as { name: string; feeds: unknown[]; createdAt: string; updatedAt: string };
  };

  it('I-3: a runtime secret PUT is a write whether or not the value equals the stored one: updatedAt moves, audited alike', async () => {
    const created = await put('hf_real_value');
    const sameValue = await put('hf_real_value');
    const otherValue = await put('hf_wrong_guess');
    expect(Date.parse(sameValue.updatedAt)).toBeGreaterThan(Date.parse(created.updatedAt));
    expect(Date.parse(otherValue.updatedAt)).toBeGreaterThan(Date.parse(sameValue.updatedAt));
    expect(Object.keys(sameValue)).toEqual(Object.keys(otherValue));
    const entries = await plane.ports.store.db
      .select({ action: auditEvents.action, details: auditEvents.details })
      .from(auditEvents)
      .where(and(eq(auditEvents.workspaceId, plane.workspaceId), eq(auditEvents.target, 'hf-token')))
      .orderBy(auditEvents.seq);
    expect(entries.map((e) => e.action)).toEqual(['runtime_secret.create', 'runtime_secret.rotate', 'runtime_secret.rotate']);
    expect(entries[1]!.details).toEqual(entries[2]!.details);
  });

  it("I-6: a workspace's token list does not show the id of the other workspace's token that created its first admin", async () => {
    const created = await plane.admin('/api/v1/workspaces', { method: 'POST', body: JSON.stringify({ name: 'team-b' }) });
    expect(created.status).toBe(201);
    const { adminToken } = (await created.json()) as { adminToken: { id: string; token: string } };
    const asB = (path: string, init: RequestInit = {}) =>
      fetch(`${plane.url}/api/v1${path}`, { ...init, headers: { authorization: `Bearer ${adminToken.token}`, 'content-type': 'application/json' } });
    const second = (await (await asB('/tokens', { method: 'POST', body: JSON.stringify({ name: 'second', role: 'viewer' }) })).json()) as { id: string };
    const listed = (await (await asB('/tokens')).json()) as { data: { id: string; createdBy: string | null }[] };
    expect(listed.data.map((t) => [t.id, t.createdBy])).toEqual([
      [adminToken.id, null],
      [second.id, adminToken.id],
    ]);
    const defaults = (await (await plane.admin('/api/v1/tokens')).json()) as { data: { createdBy: string | null }[] };
    expect(defaults.data[0]!.createdBy).toBe('system');
  });

  it('I-9: the console refuses a form whose Origin has this host but another scheme, and takes LUNANEXA_PUBLIC_URL', async () => {
    /** A sign-in from a browser that sends `Origin` but not `Sec-Fetch-Site`, on a fresh form. */
    const post = async (origin: string) => {
      const page = await fetch(`${plane.url}/console/sign-in`);
      const nonce = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
      const cookie = page.headers
        .getSetCookie()
        .find((c) => c.startsWith('lnx_sign_in='))!
        .split(';')[0]!;
      return await fetch(`${plane.url}/console/sign-in`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie, origin, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ _csrf: nonce, token: plane.adminToken }),
      });
    };
    const otherScheme = await post(plane.url.replace('http:', 'https:'));
    expect(otherScheme.status).toBe(403);
    expect(await otherScheme.text()).toContain('sent from another site');
    expect((await post('http://console.example')).status).toBe(403);
    expect((await post(plane.url)).status).toBe(303);
    expect((await post('https://console.example')).status).toBe(303);
  });
});
