import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import OpenAI, { toFile } from 'openai';
import { files, jobs } from '../../functions/store/schema/index.js';
import { seedDemoDeployment } from '../../functions/hosts/dev/fleet.js';
import { setWorkspacePolicy } from '../../functions/services/workspace-policy.js';
import { sweepExpiredFiles } from '../../functions/services/files.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { JobView } from '../../shared/batch/job.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

const DAY_S = 86_400;

/**
 * Files follow their data's retention (docs/jobs.md, "Retention"): `expires_after` at upload (OpenAI's), and the
 * `filesDays` of the data class of the deployment a job's model names, which bounds its input from submission and
 * its outputs from their writing; past it the job host's sweep deletes them (object and row), audited.
 */
describe('job files expire with their data class', () => {
  let plane: TestPlane;
  let client: OpenAI;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    client = new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: plane.adminToken, maxRetries: 0 });
    const policy = WorkspacePolicy.parse({ dataClasses: { pii: { filesDays: 2 }, internal: {} } });
    await setWorkspacePolicy({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, policy } });
    // No node: the job's rows fail fast (no replica), which is all a job needs to write its output.
    await seedDemoDeployment(plane, 1, {}, { name: 'pii-chat', dataClass: 'pii' });
    await seedDemoDeployment(plane, 1, {}, { name: 'open-chat' });
  }, 60_000);

  afterAll(async () => {
    await plane?.stop();
  });

  const expiresIn = async (fileId: string): Promise<number | null> => {
    const [row] = await plane.systemCtx.db.select({ createdAt: files.createdAt, expiresAt: files.expiresAt }).from(files).where(eq(files.id, fileId));
    return row?.expiresAt ? (row.expiresAt.getTime() - Date.now()) / 1000 : null;
  };
  const upload = async (purpose: 'user_data' | 'batch', extra: Record<string, unknown> = {}) =>
    await client.files.create({ file: await toFile(Buffer.from('{"messages":[{"role":"user","content":"x"}]}\n'), 'rows.jsonl'), purpose, ...extra });
  const submit = async (model: string, inputFileId: string) => {
    const answer = await plane.admin('/api/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rows: { kind: 'chat', model, defaults: { max_tokens: 1 } }, inputFileId, maxAttempts: 1, retry: { maxAttempts: 1 } }),
    });
    expect(answer.status, await answer.clone().text()).toBe(201);
    const id = JobView.parse(await answer.json()).id;
    return await waitFor(
      async () => {
        const job = JobView.parse(await (await plane.admin(`/api/v1/jobs/${id}`)).json());
        return ['completed', 'failed'].includes(job.state) ? job : null;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: `job ${id} to end` },
    );
  };

  it("keeps an upload for its expires_after, and shows it as OpenAI's expires_at", async () => {
    const file = await upload('batch', { expires_after: { anchor: 'created_at', seconds: 7_200 } });
    expect(file.expires_at).toBe(file.created_at + 7_200);
    expect((await client.files.retrieve(file.id)).expires_at).toBe(file.expires_at);
  });

  it("bounds a pii job's input and its outputs by the class's days; an unclassed one's stay until deleted", async () => {
    const input = await upload('user_data');
    expect(await expiresIn(input.id)).toBeNull();
    const done = await submit('pii-chat', input.id);
    const [row] = await plane.systemCtx.db.select({ filesDays: jobs.filesDays }).from(jobs).where(eq(jobs.id, done.id));
    expect(row!.filesDays).toBe(2);
    expect(done.outputFileId).not.toBeNull();
    for (const id of [input.id, done.outputFileId!]) {
      const left = await expiresIn(id);
      expect(left).toBeGreaterThan(2 * DAY_S - 120);
      expect(left).toBeLessThanOrEqual(2 * DAY_S + 1);
    }
    // A later expiry is never pushed out; an earlier one is kept.
    const short = await upload('user_data', { expires_after: { anchor: 'created_at', seconds: 3_600 } });
    await submit('pii-chat', short.id);
    expect(await expiresIn(short.id)).toBeLessThanOrEqual(3_601);

    const open = await upload('user_data');
    const plain = await submit('open-chat', open.id);
    expect(await expiresIn(open.id)).toBeNull();
    expect(await expiresIn(plain.outputFileId!)).toBeNull();
  }, 120_000);

  it('deletes files past their expiry: their objects and rows, audited, and 404 after', async () => {
    const gone = await upload('user_data');
    const kept = await upload('user_data');
    await plane.systemCtx.db
      .update(files)
      .set({ expiresAt: new Date(Date.now() - 1_000) })
      .where(eq(files.id, gone.id));
    const ctx = { ...plane.systemCtx, objects: plane.ports.objects };
    expect(await sweepExpiredFiles({ ctx, input: { limit: 100 } })).toBeGreaterThanOrEqual(1);
    await expect(client.files.retrieve(gone.id)).rejects.toMatchObject({ status: 404 });
    expect((await client.files.retrieve(kept.id)).id).toBe(kept.id);
    const audited = await plane.admin(`/api/v1/audit?action=file.expire`);
    expect(await audited.text()).toContain(gone.id);
  });
});
