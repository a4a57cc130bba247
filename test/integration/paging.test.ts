import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { machines } from '../../functions/store/schema/index.js';
import { createApiToken, ensureWorkspace } from '../../functions/services/api-tokens.js';
import { PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX } from '../../functions/api/management/paging.js';
import { newId } from '../../shared/ids.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import type { Page } from '../../shared/contracts/page.js';
import { enrollTestMachine, TEST_INVENTORY } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';

const LLAMA = {
  executable: '/opt/llama.cpp/bin/llama-server',
  executableSha256: '1'.repeat(64),
  args: ['-m', '{model_path}', '--host', '127.0.0.1', '--port', '{port}'],
  params: {},
};

const b64url = (text: string) => Buffer.from(text).toString('base64url');

/**
 * The management lists page by keyset (docs/operations.md, "Lists"): `?limit=` (1-500, 100 by default) and an
 * opaque `?cursor=`; every page keeps `data` and adds `nextCursor`, null on the last one. Machines are inserted
 * as rows (hundreds of enrollments over HTTP take minutes on two cores); the one enrolled mid-iteration goes
 * through the real enrollment.
 */
function pagingSuite(store: StoreKind) {
  let plane: TestPlane;
  let foreign: string;
  const ours = new Set<string>();
  const theirs = new Set<string>();

  const get = async (path: string, token = plane.adminToken) => {
    const response = await fetch(`${plane.url}/api/v1${path}`, { headers: { authorization: `Bearer ${token}` } });
    const text = await response.text();
    return { status: response.status, bytes: Buffer.byteLength(text), body: JSON.parse(text) as any, requestId: response.headers.get('x-request-id') };
  };
  const put = async (path: string, body: unknown, token = plane.adminToken) => {
    const response = await fetch(`${plane.url}/api/v1${path}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(response.status, await response.text()).toBe(200);
  };
  /** Follows `nextCursor` from the first page to the last; `between` runs after each page but the last. */
  const walk = async <T>(path: string, limit: number, between: (pageIndex: number) => Promise<void> = async () => {}, token = plane.adminToken) => {
    const pages: T[][] = [];
    let cursor: string | null = null;
    do {
      const answer = await get(`${path}?limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, token);
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      const page = answer.body as Page<T>;
      expect(Object.keys(page).sort()).toEqual(['data', 'nextCursor']);
      pages.push(page.data);
      cursor = page.nextCursor;
      if (cursor !== null) await between(pages.length);
    } while (cursor !== null);
    return pages;
  };
  const insertMachines = async (workspaceId: string, prefix: string, count: number, into: Set<string>) => {
    const rows = Array.from({ length: count }, (_, i) => ({
      id: newId('machine'),
      workspaceId,
      name: `${prefix}-${String(i).padStart(4, '0')}`,
      inventory: TEST_INVENTORY,
    }));
    for (let i = 0; i < rows.length; i += 500) await plane.ports.store.db.insert(machines).values(rows.slice(i, i + 500));
    for (const row of rows) into.add(row.id);
  };
  const expectError = (answer: Awaited<ReturnType<typeof get>>, code: string) => {
    expect(answer.status, JSON.stringify(answer.body)).toBe(400);
    expect(answer.body.error.code).toBe(code);
    expect(answer.body.error.requestId).toBe(answer.requestId);
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store });
    const other = await ensureWorkspace({ ctx: plane.systemCtx, input: { name: 'paging-other' } });
    foreign = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: other, name: 'foreign admin', role: 'admin' } })).token;
    await insertMachines(plane.workspaceId, 'node', 250, ours);
    await insertMachines(other, 'node', 30, theirs);
  });
  afterAll(async () => {
    await plane?.stop();
  });

  it('250 machines at limit 100: 100 + 100 + 50 in id order, no duplicate, no gap, nextCursor null at the end', async () => {
    const pages = await walk<MachineView>('/machines', 100);
    expect(pages.map((p) => p.length)).toEqual([100, 100, 50]);
    const ids = pages.flat().map((m) => m.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(new Set(ids)).toEqual(ours);
    expect(ids).toEqual([...ids].sort());
  });

  it('the default page is 100 machines, and 500 is allowed', async () => {
    const first = await get('/machines');
    expect(first.status).toBe(200);
    expect(first.body.data).toHaveLength(PAGE_LIMIT_DEFAULT);
    expect(first.body.nextCursor).toEqual(expect.any(String));
    const all = await get(`/machines?limit=${PAGE_LIMIT_MAX}`);
    expect(all.body.data).toHaveLength(250);
    expect(all.body.nextCursor).toBeNull();
  });

  it('a machine enrolled between two pages appears exactly once, with the rows of its own (its credential)', async () => {
    let enrolled = '';
    const pages = await walk<MachineView>('/machines', 100, async (index) => {
      if (index === 1) enrolled = (await enrollTestMachine(plane, `late-${store}`)).machineId;
    });
    ours.add(enrolled);
    const ids = pages.flat().map((m) => m.id);
    expect(ids.filter((id) => id === enrolled)).toHaveLength(1);
    expect(new Set(ids)).toEqual(ours);
    expect(ids).toHaveLength(ours.size);
    // The page reads credentials, leases and runtimes of its own machines only: the view matches the single read.
    const single = await get(`/machines/${enrolled}`);
    const listed = pages.flat().find((m) => m.id === enrolled)!;
    expect(listed.credentialExpiresAt).not.toBeNull();
    expect(listed).toEqual(single.body);
  });

  it("another workspace's machines never appear, and it pages its own", async () => {
    const pages = await walk<MachineView>('/machines', 7, undefined, foreign);
    expect(pages.map((p) => p.length)).toEqual([7, 7, 7, 7, 2]);
    expect(new Set(pages.flat().map((m) => m.id))).toEqual(theirs);
    const own = (await walk<MachineView>('/machines', PAGE_LIMIT_MAX)).flat();
    expect(own.some((m) => theirs.has(m.id))).toBe(false);
  });

  it('limit 0, 501, abc, 1.5, 1e2, -1 or empty: 400 validation_failed in the error envelope', async () => {
    for (const path of ['/machines', '/deployments', '/runtime-templates', '/runtime-secrets']) {
      for (const limit of ['0', '501', 'abc', '1.5', '1e2', '-1', '', '99999999999999999999'])
        expectError(await get(`${path}?limit=${limit}`), 'validation_failed');
    }
  });

  it('a malformed or tampered cursor is 400 invalid_cursor, never a 500, and is not repeated in the answer', async () => {
    const valid = (await get('/machines?limit=1')).body.nextCursor as string;
    const garbage = [
      'garbage!!',
      '%25%25%25',
      '',
      valid.slice(0, -1),
      `${valid}A`,
      b64url('{"id":1}'),
      b64url('"mch_not-a-ulid"'),
      b64url('["a","dep_01J00000000000000000000000"]'),
      b64url('not json'),
      Buffer.from([0xff, 0xfe, 0x22]).toString('base64url'),
      'A'.repeat(600),
    ];
    for (const cursor of garbage) {
      const answer = await get(`/machines?cursor=${cursor}`);
      expectError(answer, 'invalid_cursor');
      if (cursor.length > 3) expect(JSON.stringify(answer.body)).not.toContain(cursor);
    }
    // One list's cursor is no other's: a machine id is not a deployment key, nor a template name.
    expectError(await get(`/deployments?cursor=${valid}`), 'invalid_cursor');
    expectError(await get(`/runtime-templates?cursor=${valid}`), 'invalid_cursor');
    expectError(await get(`/runtime-secrets?cursor=${b64url('["x"]')}`), 'invalid_cursor');
  });

  it("deployments page by name; deleted ones and another workspace's never appear; one added after the cursor appears once", async () => {
    const names = ['d-a', 'd-b', 'd-c', 'd-d', 'd-e', 'd-f', 'd-g'];
    const spec = { model: 'm', runtime: { kind: 'simulated', model: 'm' }, replicas: 0, selector: { none: 'none' } };
    for (const name of [...names, 'd-gone']) await put(`/deployments/${name}`, spec);
    expect((await fetch(`${plane.url}/api/v1/deployments/d-gone`, { method: 'DELETE', headers: { authorization: `Bearer ${plane.adminToken}` } })).status).toBe(
      200,
    );
    await put('/deployments/d-theirs', spec, foreign);

    const pages = await walk<{ name: string }>('/deployments', 3, async (index) => {
      if (index === 1) await put('/deployments/d-h', spec);
    });
    expect(pages.map((p) => p.length)).toEqual([3, 3, 2]);
    expect(pages.flat().map((d) => d.name)).toEqual([...names, 'd-h']);
    const theirPages = await walk<{ name: string }>('/deployments', 3, undefined, foreign);
    expect(theirPages.flat().map((d) => d.name)).toEqual(['d-theirs']);
  });

  it('runtime templates and runtime secrets page by name', async () => {
    for (const name of ['t-1', 't-2', 't-3', 't-4', 't-5']) await put(`/runtime-templates/${name}`, LLAMA);
    for (const name of ['s-1', 's-2', 's-3']) await put(`/runtime-secrets/${name}`, { value: 'v' });
    await put('/runtime-templates/t-theirs', LLAMA, foreign);

    const templates = await walk<{ name: string }>('/runtime-templates', 2);
    expect(templates.map((p) => p.map((t) => t.name))).toEqual([['t-1', 't-2'], ['t-3', 't-4'], ['t-5']]);
    const secrets = await walk<{ name: string }>('/runtime-secrets', 2);
    expect(secrets.map((p) => p.map((s) => s.name))).toEqual([['s-1', 's-2'], ['s-3']]);
    expect((await walk<{ name: string }>('/runtime-templates', 100, undefined, foreign)).flat().map((t) => t.name)).toEqual(['t-theirs']);
  });

  it('the OpenAPI document declares limit and cursor on every list', async () => {
    const doc = (await (await fetch(`${plane.url}/api/v1/openapi.json`)).json()) as {
      paths: Record<string, { get?: { parameters?: Array<{ name: string; in: string }> } }>;
    };
    for (const path of ['/machines', '/deployments', '/runtime-templates', '/runtime-secrets']) {
      expect(doc.paths[path]!.get!.parameters!.filter((p) => p.in === 'query').map((p) => p.name)).toEqual(['limit', 'cursor']);
    }
  });

  it('at 2,000 machines a default page holds 100 of them and a walk at the largest limit sees all 2,000 (sizes printed)', async () => {
    await insertMachines(plane.workspaceId, 'bulk', 2_000 - ours.size, ours);
    const first = await get('/machines');
    expect(first.body.data).toHaveLength(PAGE_LIMIT_DEFAULT);
    let total = 0;
    let bytes = 0;
    let pages = 0;
    let cursor: string | null = null;
    do {
      const answer = await get(`/machines?limit=${PAGE_LIMIT_MAX}${cursor ? `&cursor=${cursor}` : ''}`);
      total += answer.body.data.length;
      bytes += answer.bytes;
      pages += 1;
      cursor = answer.body.nextCursor;
    } while (cursor !== null);
    expect(total).toBe(2_000);
    // A default page is a twentieth of the fleet, and so about a twentieth of the bytes.
    expect(first.bytes).toBeLessThan(bytes / 10);
    const max = await get(`/machines?limit=${PAGE_LIMIT_MAX}`);
    console.log(
      `[paging ${store}] 2,000 machines: default page (${PAGE_LIMIT_DEFAULT}) ${first.bytes} bytes; limit ${PAGE_LIMIT_MAX} ${max.bytes} bytes; all of them in ${pages} pages of ${PAGE_LIMIT_MAX}, ${bytes} bytes`,
    );
  });
}

describe('list paging (PGlite)', () => pagingSuite('pglite'));
describePg('list paging (PostgreSQL)', () => pagingSuite('pg'));
