import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { usageReport } from '../../functions/services/usage.js';
import { writeWorkloads, type WorkloadRow } from '../../functions/services/workloads.js';
import { workloads } from '../../functions/store/schema/index.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { USAGE_COLUMNS, type UsageReport, type UsageRow } from '../../shared/contracts/usage.js';
import { parseCsv } from '../helpers/csv.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { insertToken, insertWorkspace } from '../helpers/sql-tokens.js';
import { describeStores } from '../helpers/store.js';

/**
 * Usage (docs/operations.md, "Usage"): what inference requests are recorded with, and `GET /api/v1/usage`, which
 * sums them in the store per UTC day, API token and model.
 */

let serial = 0;
const workload = (over: Partial<WorkloadRow>): WorkloadRow => ({
  id: `wkl_usage_${(serial += 1)}`,
  workspaceId: 'ws_unset',
  deploymentId: 'dep_1',
  kind: 'chat',
  idempotencyKey: null,
  deadline: new Date('2030-01-01T00:00:00.000Z'),
  state: 'succeeded',
  instanceId: 'ins_1',
  createdAt: new Date('2026-05-01T12:00:00.000Z'),
  tokenId: 'tok_a',
  model: 'chat',
  promptTokens: 1,
  completionTokens: 1,
  ...over,
});

describeStores('usage summed in the store', (store) => {
  let workspace: string;
  let tokenA: string;
  let tokenB: string;
  const report = (input: Partial<Parameters<typeof usageReport>[0]['input']> = {}) =>
    usageReport({
      ctx: { db: store().db, actor: 'system' },
      input: { workspaceId: workspace, from: '2026-04-30', to: '2026-05-02', groupBy: ['day', 'token', 'model'], ...input },
    });

  beforeAll(async () => {
    const db = store().db;
    const [a, b] = [await insertWorkspace(db, 'usage-a'), await insertWorkspace(db, 'usage-b')];
    workspace = a;
    const mine = (over: Partial<WorkloadRow>) => workload({ workspaceId: a, ...over });
    tokenA = (await insertToken(db, { workspaceId: a, name: 'alpha', role: 'inference' })).id;
    tokenB = (await insertToken(db, { workspaceId: a, name: 'beta', role: 'admin' })).id;
    const other = (await insertToken(db, { workspaceId: b, name: 'other', role: 'admin' })).id;
    await writeWorkloads(db, [
      // Either side of midnight UTC, of the first and last days asked for, and outside them.
      mine({ tokenId: tokenA, createdAt: new Date('2026-04-29T23:59:59.999Z'), promptTokens: 1000 }),
      mine({ tokenId: tokenA, createdAt: new Date('2026-04-30T00:00:00.000Z'), promptTokens: 3, completionTokens: 4 }),
      mine({ tokenId: tokenA, createdAt: new Date('2026-04-30T23:59:59.999Z'), promptTokens: 5, completionTokens: 6 }),
      mine({ tokenId: tokenA, createdAt: new Date('2026-05-01T00:00:00.000Z'), promptTokens: 7, completionTokens: 8 }),
      mine({ tokenId: tokenA, createdAt: new Date('2026-05-02T23:59:59.999Z'), model: 'embed', promptTokens: 9, completionTokens: null }),
      mine({ tokenId: tokenA, createdAt: new Date('2026-05-03T00:00:00.000Z'), promptTokens: 2000 }),
      // Unknown counts add nothing; a failed request still counts as a request.
      mine({ tokenId: tokenB, state: 'failed', promptTokens: null, completionTokens: null }),
      mine({ tokenId: tokenB, promptTokens: 10, completionTokens: 11 }),
      // Recorded before usage was: no token, no model.
      mine({ tokenId: null, model: null, promptTokens: null, completionTokens: null }),
      // Another workspace's, on the same day and model.
      workload({ workspaceId: b, tokenId: other, promptTokens: 3000, completionTokens: 3000 }),
    ]);
  });

  it('groups by UTC day, token and model, the first and last day included, names the tokens and orders the rows', async () => {
    const row = (
      day: string,
      tokenId: string | null,
      tokenName: string | null,
      model: string | null,
      requests: number,
      promptTokens: number,
      completionTokens: number,
    ): UsageRow => ({ day, tokenId, tokenName, model, requests, promptTokens, completionTokens });
    const rows = await report();
    expect(rows).toEqual([
      row('2026-04-30', tokenA, 'alpha', 'chat', 2, 8, 10),
      ...[
        row('2026-05-01', tokenA, 'alpha', 'chat', 1, 7, 8),
        row('2026-05-01', tokenB, 'beta', 'chat', 2, 10, 11),
        row('2026-05-01', null, null, null, 1, 0, 0),
      ].sort((x, y) => (x.tokenId === null ? 1 : y.tokenId === null ? -1 : x.tokenId.localeCompare(y.tokenId))),
      row('2026-05-02', tokenA, 'alpha', 'embed', 1, 9, 0),
    ]);
  });

  it('leaves out the dimensions not grouped by', async () => {
    expect(await report({ groupBy: ['model'] })).toEqual([
      { day: null, tokenId: null, tokenName: null, model: 'chat', requests: 5, promptTokens: 25, completionTokens: 29 },
      { day: null, tokenId: null, tokenName: null, model: 'embed', requests: 1, promptTokens: 9, completionTokens: 0 },
      { day: null, tokenId: null, tokenName: null, model: null, requests: 1, promptTokens: 0, completionTokens: 0 },
    ]);
    expect(await report({ groupBy: ['day'], from: '2026-05-02', to: '2026-05-03' })).toEqual([
      { day: '2026-05-02', tokenId: null, tokenName: null, model: null, requests: 1, promptTokens: 9, completionTokens: 0 },
      { day: '2026-05-03', tokenId: null, tokenName: null, model: null, requests: 1, promptTokens: 2000, completionTokens: 1 },
    ]);
  });

  it("sees only the workspace's own requests, and none outside the days asked for", async () => {
    const totals = await report({ groupBy: ['token'], from: '2026-01-01', to: '2026-12-31' });
    expect(totals.map((r) => r.tokenName)).toEqual(expect.not.arrayContaining(['other']));
    expect(totals.reduce((n, r) => n + r.requests, 0)).toBe(9);
    expect(await report({ from: '2026-06-01', to: '2026-06-30' })).toEqual([]);
  });
});

describe('usage of a real fleet through GET /api/v1/usage', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  /** An inference token whose name needs quoting in CSV. */
  let consumer: { id: string; token: string };
  const CONSUMER_NAME = 'billing, "team" A';
  /** The UTC days the requests may have fallen on (a run across midnight spans two). */
  const days = new Set<string>();

  const machines = async (): Promise<MachineView[]> => ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
  const infer = async (token: string, path: string, body: Record<string, unknown>) => {
    days.add(new Date().toISOString().slice(0, 10));
    const response = await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await response.text();
    expect(response.status, text).toBe(200);
    days.add(new Date().toISOString().slice(0, 10));
    return { workloadId: response.headers.get('x-lunanexa-workload-id')!, text };
  };
  const usage = async (query = '', token = plane.adminToken, headers: Record<string, string> = {}) =>
    await fetch(`${plane.url}/api/v1/usage${query}`, { headers: { authorization: `Bearer ${token}`, ...headers } });
  /** The report's rows summed per token and model, whatever day they fell on. */
  const perTokenModel = (rows: readonly UsageRow[]) => {
    const sums = new Map<string, { requests: number; promptTokens: number; completionTokens: number }>();
    for (const r of rows) {
      const key = `${r.tokenName}|${r.model}`;
      const sum = sums.get(key) ?? { requests: 0, promptTokens: 0, completionTokens: 0 };
      sums.set(key, {
        requests: sum.requests + r.requests,
        promptTokens: sum.promptTokens + r.promptTokens,
        completionTokens: sum.completionTokens + r.completionTokens,
      });
    }
    return Object.fromEntries(sums);
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    await seedDemoDeployment(plane, 1, { loadMs: 100, memoryMiB: 64 });
    await seedDemoDeployment(plane, 1, { loadMs: 100, memoryMiB: 64 }, { name: 'sim-second' });
    consumer = await insertToken(plane.ports.store.db, { workspaceId: plane.workspaceId, name: CONSUMER_NAME, role: 'inference' });
    nodes = [await startSimNode(plane, 'usage-1', join(plane.dataDir, 'nodes'))];
    await waitFor(async () => (await machines()).some((m) => m.state === 'ready' && m.runtimes.filter((r) => r.routable).length === 2), {
      timeoutMs: 45_000,
      what: 'both runtimes routable',
    }).catch(async (error: unknown) => {
      throw new Error(`${String(error)}\n${(await readFile(nodes[0]!.logFile, 'utf8').catch(() => '')).slice(-2_000)}`);
    });
  }, 90_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it("records each request's token, model, first byte and the runtime's own counts", async () => {
    const messages = (content: string) => [{ role: 'user', content }];
    const whole = await infer(plane.adminToken, '/v1/chat/completions', { model: 'sim-chat', messages: messages('one two three'), max_tokens: 5 });
    expect(JSON.parse(whole.text).usage).toEqual({ prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
    await infer(plane.adminToken, '/v1/completions', { model: 'sim-second', prompt: 'a b', max_tokens: 4 });
    const withUsage = await infer(consumer.token, '/v1/chat/completions', {
      model: 'sim-chat',
      messages: messages('a b c d'),
      max_tokens: 7,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(withUsage.text).toContain('"usage":{"prompt_tokens":4,"completion_tokens":7,"total_tokens":11}');
    const withoutUsage = await infer(consumer.token, '/v1/chat/completions', { model: 'sim-chat', messages: messages('x y'), max_tokens: 6, stream: true });
    expect(withoutUsage.text).not.toContain('"usage":{');
    await infer(consumer.token, '/v1/embeddings', { model: 'sim-second', input: 'p q r' });

    await plane.ports.dataPlane.workloads.flush();
    const recorded = await waitFor(
      async () => {
        await plane.ports.dataPlane.workloads.flush();
        const rows = await plane.ports.store.db.select().from(workloads).where(eq(workloads.workspaceId, plane.workspaceId));
        return rows.length === 5 && rows.every((r) => r.state === 'succeeded') ? new Map(rows.map((r) => [r.id, r])) : null;
      },
      { what: 'five finished workloads' },
    );
    expect(recorded.get(whole.workloadId)).toMatchObject({ tokenId: expect.stringMatching(/^tok_/), model: 'sim-chat', promptTokens: 3, completionTokens: 5 });
    expect(recorded.get(withUsage.workloadId)).toMatchObject({ tokenId: consumer.id, model: 'sim-chat', promptTokens: 4, completionTokens: 7 });
    // No usage from the runtime: the events the agent counted, the role and finish chunks among them.
    expect(recorded.get(withoutUsage.workloadId)).toMatchObject({ tokenId: consumer.id, model: 'sim-chat', promptTokens: null, completionTokens: 6 + 2 });
    for (const row of recorded.values()) {
      expect(row.firstByteMs).not.toBeNull();
      expect(row.firstByteMs!).toBeGreaterThanOrEqual(0);
      expect(row.firstByteMs!).toBeLessThan(30_000);
    }
  });

  it('sums them per day, token and model for the workspace, JSON by default', async () => {
    const response = await usage();
    expect(response.status).toBe(200);
    const report = (await response.json()) as UsageReport;
    expect(report.groupBy).toEqual(['day', 'token', 'model']);
    expect(days.has(report.to)).toBe(true);
    for (const row of report.data) expect(days.has(row.day!)).toBe(true);
    expect(perTokenModel(report.data)).toEqual({
      'bootstrap admin|sim-chat': { requests: 1, promptTokens: 3, completionTokens: 5 },
      'bootstrap admin|sim-second': { requests: 1, promptTokens: 2, completionTokens: 4 },
      [`${CONSUMER_NAME}|sim-chat`]: { requests: 2, promptTokens: 4, completionTokens: 7 + 8 },
      [`${CONSUMER_NAME}|sim-second`]: { requests: 1, promptTokens: 3, completionTokens: 0 },
    });
    expect(report.data.find((r) => r.tokenName === CONSUMER_NAME)!.tokenId).toBe(consumer.id);

    const byModel = (await (await usage('?groupBy=model')).json()) as UsageReport;
    expect(byModel.data.map(({ model, requests }) => ({ model, requests }))).toEqual([
      { model: 'sim-chat', requests: 3 },
      { model: 'sim-second', requests: 2 },
    ]);
  });

  it('answers CSV with a header row for format=csv and for Accept: text/csv, that reads back as the JSON', async () => {
    const json = (await (await usage()).json()) as UsageReport;
    const asked = await usage('?format=csv');
    expect(asked.status).toBe(200);
    expect(asked.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(asked.headers.get('content-disposition')).toBe(`attachment; filename="usage-${json.from}-${json.to}.csv"`);
    const csv = await asked.text();
    expect(csv).toContain('"billing, ""team"" A"');
    const [header, ...records] = parseCsv(csv);
    expect(header).toEqual([...USAGE_COLUMNS]);
    expect(records).toEqual(json.data.map((row) => USAGE_COLUMNS.map((column) => (row[column] === null ? '' : String(row[column])))));
    expect(records.some((r) => r[2] === CONSUMER_NAME)).toBe(true);

    const negotiated = await usage('', plane.adminToken, { accept: 'text/csv' });
    expect(negotiated.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(await negotiated.text()).toBe(csv);
    // An explicit format wins over Accept.
    expect((await usage('?format=json', plane.adminToken, { accept: 'text/csv' })).headers.get('content-type')).toMatch(/^application\/json/);
  });

  it("shows no other workspace's usage, and another workspace none of this one's", async () => {
    const db = plane.ports.store.db;
    const otherSpace = await insertWorkspace(db, 'usage-elsewhere');
    const other = await insertToken(db, { workspaceId: otherSpace, name: 'elsewhere', role: 'viewer' });
    await writeWorkloads(db, [
      workload({ workspaceId: otherSpace, tokenId: other.id, model: 'elsewhere-model', createdAt: new Date(), promptTokens: 100, completionTokens: 200 }),
    ]);
    const theirs = (await (await usage('?groupBy=token,model', other.token)).json()) as UsageReport;
    expect(theirs.data).toEqual([
      { day: null, tokenId: other.id, tokenName: 'elsewhere', model: 'elsewhere-model', requests: 1, promptTokens: 100, completionTokens: 200 },
    ]);
    const ours = (await (await usage('?groupBy=token,model')).json()) as UsageReport;
    expect(ours.data.map((r) => r.model)).not.toContain('elsewhere-model');
    expect(ours.data.reduce((n, r) => n + r.requests, 0)).toBe(5);
  });

  it('answers 400 in the error envelope to bad input, 403 to an inference token and 401 to none', async () => {
    for (const query of [
      '?from=2026-02-30',
      '?to=tomorrow',
      '?from=2026-03-02&to=2026-03-01',
      '?from=2024-01-01&to=2025-01-01',
      '?groupBy=day,colour',
      '?groupBy=',
      '?format=xml',
    ]) {
      const response = await usage(query);
      expect(response.status, query).toBe(400);
      const body = (await response.json()) as { error: { code: string; message: string; requestId: string } };
      expect(body.error.code, query).toBe('validation_failed');
      expect(body.error.requestId).toBeTruthy();
    }
    expect((await usage('', consumer.token)).status).toBe(403);
    expect((await fetch(`${plane.url}/api/v1/usage`)).status).toBe(401);
  });
});
