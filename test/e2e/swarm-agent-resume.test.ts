import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { desc, eq } from 'drizzle-orm';
import { Swarm } from '@lunanexa/sdk';
import { ensureJobTemplates, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { jobs, machines, runs, runWorkers } from '../../functions/store/schema/index.js';
import { readParquetRows, writeParquetRows } from '../../shared/batch/parquet.js';
import type { SimStats } from '../../sim/options.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * The jobs issue's end-to-end case (docs/jobs.md): on a fleet of simulated nodes, the SDK brings a swarm up, a
 * 10,000-row Parquet chat job runs beside it on the `agent` backend (its runner a worker on one of the nodes), the
 * agent of that node is killed halfway (SIGKILL), and the job resumes on another node from its checkpoint: the
 * runtimes' own request counters show that finished rows were not sent again. One output row per input row, in
 * order; the swarm comes down when the scope ends, and when the scope throws.
 */
describe('a swarm and a Parquet job on the agent backend, its node killed halfway', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let dir: string;

  /** Requests the simulated runtimes answered, from their own counters (a killed node's runtimes go on answering). */
  const runtimeRequests = async (): Promise<number> => {
    let total = 0;
    for (const node of nodes) {
      const runtimes = join(node.stateDir, 'runtimes');
      for (const name of (await readdir(runtimes).catch(() => [])).filter((n) => n.endsWith('.json'))) {
        const record = JSON.parse(await readFile(join(runtimes, name), 'utf8')) as { port: number; token: string };
        const answer = await fetch(`http://127.0.0.1:${record.port}/sim/stats`, { headers: { authorization: `Bearer ${record.token}` } }).catch(() => null);
        if (answer?.ok) total += ((await answer.json()) as SimStats).requests;
      }
    }
    return total;
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
    await stopSimNodes(nodes);
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
      const before = await runtimeRequests();
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
      sent = (await runtimeRequests()) - before;
    }
    // Sent again only what the lost runner had not had acknowledged: its rows in flight and its unsent results
    // (at most one checkpoint's worth, 200 rows, and the concurrency), never the rows it finished.
    console.log(`10,000-row Parquet job, the runner's node killed at half: the runtimes answered ${sent} requests (${sent - total} sent again)`);
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
