import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { and, desc, eq, inArray } from 'drizzle-orm';
import { Swarm } from '@lunanexa/sdk';
import { ensureJobTemplates, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { apiTokens, jobs, machines, runs, runWorkers, workloads } from '../../functions/store/schema/index.js';
import { readParquetRows, writeParquetRows } from '../../shared/batch/parquet.js';
import { JobView } from '../../shared/batch/job.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { stopLeftRuntimes } from '../helpers/sim-runtimes.js';

/**
 * The jobs issue's end-to-end case (docs/jobs.md): on a fleet of simulated nodes, the SDK brings a swarm up, a
 * 10,000-row Parquet chat job runs beside it on the `agent` backend (its runner a worker on one of the nodes), the
 * agent of that node is killed halfway (SIGKILL), and the job resumes on another node from its checkpoint: the
 * requests answered for its runners (the plane's records of them) show that finished rows were not sent again. One output row per input row, in
 * order; the swarm comes down when the scope ends, and when the scope throws.
 */
describe('a swarm and a Parquet job on the agent backend, its node killed halfway', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let dir: string;

  /**
   * Requests of a job's processes (every attempt's token) that a runtime answered, as the plane recorded them (its
   * workloads, written in batches: callers wait for them). A runtime's own counter would lose what a loaded machine
   * restarting it had counted.
   */
  const answered = async (jobId: string): Promise<number> => {
    const tokens = (await plane.systemCtx.db.select({ id: apiTokens.id, name: apiTokens.name }).from(apiTokens)).filter((t) =>
      t.name.startsWith(`runner of ${jobId},`),
    );
    if (tokens.length === 0) return 0;
    const rows = await plane.systemCtx.db
      .select({ id: workloads.id })
      .from(workloads)
      .where(
        and(
          inArray(
            workloads.tokenId,
            tokens.map((t) => t.id),
          ),
          eq(workloads.state, 'succeeded'),
        ),
      );
    return rows.length;
  };

  /** The machine of the worker that runs (or ran) the job's latest runner, once placed. */
  const runnerMachine = async (jobId: string): Promise<string | null> => {
    const [row] = await plane.systemCtx.db
      .select({ name: machines.name })
      .from(runs)
      .innerJoin(runWorkers, eq(runWorkers.runId, runs.id))
      .innerJoin(machines, eq(machines.id, runWorkers.machineId))
      .where(eq(runs.jobId, jobId))
      .orderBy(desc(runs.submittedAt))
      .limit(1);
    return row?.name ?? null;
  };

  const swarmConfig = (name: string) => ({
    name,
    deployment: {
      model: 'sim-chat',
      runtime: { kind: 'simulated' as const, model: 'sim-chat', ttftMs: 5, tokensPerSecond: 2_000, loadMs: 100, memoryMiB: 256, failureRate: 0 },
      replicas: 2,
      maxConcurrency: 32,
      selector: { sim: 'true' },
      memoryMiB: 256,
    },
    jobs: { backend: 'agent' as const, concurrency: 32 },
  });

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    await ensureJobTemplates(plane);
    dir = join(plane.dataDir, 'resume');
    await mkdir(dir, { recursive: true });
    const root = join(plane.dataDir, 'nodes');
    nodes = await Promise.all(['spark-a', 'spark-b', 'spark-c'].map((name) => startSimNode(plane, name, root)));
  }, 120_000);

  afterAll(async () => {
    await stopSimNodes(nodes.filter((n) => n.process.exitCode === null && n.process.signalCode === null));
    // The killed node's runtimes outlive its agent, waiting for one to adopt them.
    for (const node of nodes) await stopLeftRuntimes(node);
    await plane?.stop();
  });

  it('resumes on another node without sending a finished row again, and writes one output row per input row', async () => {
    const total = 10_000;
    const rows = Array.from({ length: total }, (_, i) => ({ custom_id: `r-${i}`, messages: [{ role: 'user', content: `row ${i}` }] }));
    const input = join(dir, 'prompts.parquet');
    const output = join(dir, 'answers.parquet');
    await writeFile(
      input,
      writeParquetRows(
        rows,
        [
          { name: 'custom_id', type: 'STRING' },
          { name: 'messages', type: 'JSON' },
        ],
        { rowGroupSize: 1_000 },
      ),
    );
    const options = { url: plane.url, token: plane.adminToken, pollMs: 200, timeoutMs: 120_000 };
    let killed = '';
    let sent = 0;
    {
      await using swarm = await Swarm.up(swarmConfig('evals'), options);
      const job = await swarm.submitJob({ rows: { kind: 'chat', defaults: { max_tokens: 1 } } }, { input, output });
      const first = await waitFor(
        async () => {
          const [row] = await plane.systemCtx.db.select({ done: jobs.doneRows, attempt: jobs.attempt }).from(jobs).where(eq(jobs.id, job.id));
          const machine = await runnerMachine(job.id);
          return row && row.done >= total / 2 && machine ? { machine, attempt: row.attempt } : null;
        },
        { timeoutMs: 180_000, intervalMs: 50, what: 'half the rows done by a runner on a node' },
      );
      expect(first.attempt).toBe(0);
      killed = first.machine;
      nodes.find((n) => n.name === killed)!.process.kill('SIGKILL');

      const done = await job.wait({ intervalMs: 250, timeoutMs: 240_000 });
      expect(done).toMatchObject({ state: 'completed', rows: { total, succeeded: total, failed: 0 } });
      expect(done.spec).toMatchObject({ backend: 'agent', rows: { model: 'evals' } });
      // Its last attempt ran elsewhere: the killed node took nothing new.
      expect(done.attempt).toBeGreaterThanOrEqual(1);
      const resumedOn = await runnerMachine(job.id);
      expect(resumedOn).not.toBeNull();
      expect(resumedOn).not.toBe(killed);
      await waitFor(async () => (await answered(job.id)) >= total, { timeoutMs: 30_000, intervalMs: 200, what: 'the workloads of every row recorded' });
      sent = await answered(job.id);
      // Its runner's log stays on its node and is fetched over the node's link: what it did, never its rows.
      const logs = await plane.admin(`/api/v1/jobs/${job.id}/logs`);
      expect(logs.status, await logs.clone().text()).toBe(200);
      const lines = ((await logs.json()) as { lines: string[] }).lines.join('\n');
      expect(lines).toContain(`job ${job.id}, attempt ${done.attempt}:`);
      expect(lines).toContain(`done: ${total} rows in the input`);
      expect(lines).not.toContain('content');
    }
    // Sent again only what the lost runner had not had acknowledged: its rows in flight and its unsent results
    // (at most one checkpoint's worth, 200 rows, and the concurrency), never the rows it finished.
    console.log(`10,000-row Parquet job, the runner's node killed at half: ${sent} requests answered (${sent - total} sent again)`);
    expect(sent).toBeGreaterThanOrEqual(total);
    expect(sent - total).toBeLessThanOrEqual(200 + 32);

    const back = await readParquetRows(await readFile(output), { rowStart: 0, rowEnd: total + 1 });
    expect(back).toHaveLength(total);
    expect(back.map((r) => r.custom_id)).toEqual(rows.map((r) => r.custom_id));
    expect(back.every((r) => r.error === null && (JSON.parse(r.response as string) as { status_code: number }).status_code === 200)).toBe(true);
    // Down with the scope: no swarm, no deployment.
    expect((await plane.admin('/api/v1/swarms/evals')).status).toBe(404);
    expect((await plane.admin('/api/v1/deployments/evals')).status).toBe(404);
  }, 420_000);

  it("runs a user's command beside the swarm: its process calls the swarm's endpoint with the variables it is given", async () => {
    const options = { url: plane.url, token: plane.adminToken, pollMs: 200, timeoutMs: 120_000 };
    await using swarm = await Swarm.up(swarmConfig('evals-cmd'), options);
    const submit = async (body: unknown) =>
      await plane.admin('/api/v1/jobs/commands', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const ended = async (id: string) =>
      await waitFor(
        async () => {
          const job = JobView.parse(await (await plane.admin(`/api/v1/jobs/${id}`)).json());
          return ['completed', 'failed'].includes(job.state) ? job : null;
        },
        { timeoutMs: 120_000, intervalMs: 200, what: `command job ${id} to end` },
      );
    // Through the SDK: the swarm's submitCommand, and its handle's wait.
    const done = await (await swarm.submitCommand({ command: { template: 'sim-client', params: { requests: 5 } } })).wait({
      intervalMs: 200,
      timeoutMs: 120_000,
    });
    expect(done).toMatchObject({ kind: 'command', state: 'completed', spec: { backend: 'agent', command: { template: 'sim-client', model: 'evals-cmd' } } });
    await waitFor(async () => (await answered(done.id)) >= 5, { timeoutMs: 30_000, intervalMs: 200, what: 'its five requests recorded' });
    expect(await answered(done.id)).toBe(5);
    const logs = (await (await plane.admin(`/api/v1/jobs/${done.id}/logs`)).json()) as { lines: string[] };
    expect(logs.lines).toContain('sim-client: 5 of 5 answered by evals-cmd');

    // A process that exits non-zero is started again while attempts last, then the job fails saying why.
    const bad = await submit({ command: { template: 'sim-client', params: { requests: 1 }, model: 'no-such-model' }, maxAttempts: 2 });
    const failed = await ended(JobView.parse(await bad.json()).id);
    expect(failed).toMatchObject({ state: 'failed', attempt: 1 });
    expect(failed.reason).toContain('exited with code 1, attempt 2 of 2');

    // A template that is not registered, or bad params, is refused at submission; nothing is written.
    const count = async () => (await plane.systemCtx.db.select({ id: jobs.id }).from(jobs)).length;
    const jobsBefore = await count();
    expect((await submit({ command: { template: 'no-such-template' } })).status).toBe(400);
    expect((await submit({ command: { template: 'sim-client', params: { requests: 0 } } })).status).toBe(400);
    expect((await submit({ command: { template: 'sim-client' }, swarm: 'no-such-swarm' })).status).toBe(404);
    expect((await submit({ command: {} })).status).toBe(400);
    expect(await count()).toBe(jobsBefore);
  }, 240_000);

  it('brings the swarm down when the code in its scope throws', async () => {
    const options = { url: plane.url, token: plane.adminToken, pollMs: 200, timeoutMs: 120_000 };
    const failing = async () => {
      await using swarm = await Swarm.up(swarmConfig('evals-throws'), options);
      expect((await plane.admin('/api/v1/swarms/evals-throws')).status).toBe(200);
      expect(swarm.view.replicas.ready).toBeGreaterThanOrEqual(1);
      throw new Error('the evaluation script failed');
    };
    await expect(failing()).rejects.toThrow('the evaluation script failed');
    expect((await plane.admin('/api/v1/swarms/evals-throws')).status).toBe(404);
    expect((await plane.admin('/api/v1/deployments/evals-throws')).status).toBe(404);
  }, 180_000);
});
