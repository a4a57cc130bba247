import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import OpenAI, { toFile } from 'openai';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { jobs } from '../../functions/store/schema/index.js';
import { JobView } from '../../shared/batch/job.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { slurmUnavailable, startSlurm, type SlurmCluster } from '../helpers/slurm.js';

const unavailable = slurmUnavailable();

/** A JSONL file of purpose `user_data`, uploaded through the Files API with the official client. */
const upload = async (plane: TestPlane, text: string) =>
  await new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: plane.adminToken, maxRetries: 0 }).files.create({
    file: await toFile(Buffer.from(text), 'rows.jsonl'),
    purpose: 'user_data',
  });

/**
 * A job through a real Slurm (docs/jobs.md, "Slurm"): the control plane, configured with the `slurm` backend, submits
 * the job's runner with `sbatch` to a single-node Slurm from Debian's slurm-wlm (started by the harness, with munge);
 * the runner sends the rows through the plane to a simulated runtime on a real agent, and the job completes with one
 * output line per row. Skipped only outside CI, on a machine without Slurm or root.
 */
describe.skipIf(unavailable !== null && !process.env.CI)(`a job through real Slurm${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  let slurm: SlurmCluster;
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let logDir: string;

  beforeAll(async () => {
    slurm = await startSlurm();
    logDir = join(slurm.dir, 'runners');
    await mkdir(logDir, { recursive: true });
    plane = await startTestPlane({ store: 'pglite', config: { jobsSlurm: { runners: 2, cpus: 1, memoryMiB: 512, extraArgs: [], logDir, conf: slurm.conf } } });
    await seedDemoDeployment(plane, 1, { loadMs: 100, tokensPerSecond: 500 }, { maxConcurrency: 8 });
    nodes = [await startSimNode(plane, 'slurm-node', join(plane.dataDir, 'nodes'))];
    await waitFor(
      async () => {
        const answer = await plane.admin('/v1/chat/completions', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'ping' }], max_tokens: 1 }),
        });
        return answer.status === 200;
      },
      { timeoutMs: 60_000, intervalMs: 300, what: 'sim-chat to answer' },
    );
  }, 120_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
    await slurm?.stop();
  });

  it('runs a chat job whose runner is a Slurm batch job: one output line per row, in order', async () => {
    const rows = Array.from({ length: 50 }, (_, i) => JSON.stringify({ custom_id: `s-${i}`, messages: [{ role: 'user', content: `question ${i}` }] }));
    const file = await upload(plane, `${rows.join('\n')}\n`);
    const submitted = await plane.admin('/api/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rows: { kind: 'chat', model: 'sim-chat', defaults: { max_tokens: 2 } }, inputFileId: file.id, backend: 'slurm', concurrency: 4 }),
    });
    expect(submitted.status, await submitted.clone().text()).toBe(201);
    const job = JobView.parse(await submitted.json());
    // While it runs, its handle is the Slurm job id sbatch gave.
    const handle = await waitFor(
      async () => {
        const [row] = await plane.systemCtx.db.select({ handle: jobs.handle }).from(jobs).where(eq(jobs.id, job.id));
        return row?.handle ?? null;
      },
      { timeoutMs: 30_000, intervalMs: 50, what: 'the runner submitted to Slurm' },
    );
    expect(handle).toMatch(/^[0-9]+$/);
    const done = await waitFor(
      async () => {
        const view = JobView.parse(await (await plane.admin(`/api/v1/jobs/${job.id}`)).json());
        return ['completed', 'failed', 'cancelled'].includes(view.state) ? view : null;
      },
      { timeoutMs: 120_000, intervalMs: 200, what: 'the Slurm job to end' },
    );
    expect(done).toMatchObject({ state: 'completed', rows: { total: 50, succeeded: 50, failed: 0 } });
    const output = (await (await plane.admin(`/v1/files/${done.outputFileId}/content`)).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } });
    expect(output.map((l) => l.custom_id)).toEqual(rows.map((_, i) => `s-${i}`));
    expect(output.every((l) => l.response.status_code === 200)).toBe(true);
    // Slurm ran it: its output file is named after the job, the attempt and the Slurm id.
    expect(await readdir(logDir)).toContain(`lunanexa-${job.id}-0-${handle}.log`);
    expect(await readFile(join(logDir, `lunanexa-${job.id}-0-${handle}.log`), 'utf8')).not.toContain('Bearer');
  }, 180_000);

  it('refuses a slurm job on a control plane without the slurm backend', async () => {
    const bare = await startTestPlane({ store: 'pglite' });
    try {
      const file = await upload(bare, '{"messages":[{"role":"user","content":"x"}]}\n');
      const refused = await bare.admin('/api/v1/jobs', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ rows: { kind: 'chat', model: 'sim-chat' }, inputFileId: file.id, backend: 'slurm' }),
      });
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { error: { message: string } }).error.message).toContain('slurm backend is not configured');
      expect(await bare.systemCtx.db.select({ id: jobs.id }).from(jobs)).toEqual([]);
    } finally {
      await bare.stop();
    }
  }, 60_000);
});
