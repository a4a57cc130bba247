import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { jobs } from '../../functions/store/schema/index.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import type { SimStats } from '../../sim/options.js';
import { JobView } from '../../shared/batch/job.js';
import { readParquetRows, writeParquetRows } from '../../shared/batch/parquet.js';
import { buildCli, runCli } from '../helpers/cli.js';
import { eq } from 'drizzle-orm';

/**
 * The OpenAI Batch API end to end (docs/jobs.md): the official `openai` SDK unmodified uploads a JSONL file,
 * creates a batch on `/v1/chat/completions`, follows it and reads its output and error files; the batch's runner
 * (the `local` backend: a process of its own) sends its rows through the plane to a simulated runtime on a real
 * agent, checkpoints them, and starts again from its checkpoint when it is killed.
 */
describe('the OpenAI Batch API on the local backend', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let client: OpenAI;

  /** Requests the simulated runtimes answered, from their own counters. */
  const runtimeRequests = async (): Promise<number> => {
    let total = 0;
    for (const node of nodes) {
      const dir = join(node.stateDir, 'runtimes');
      for (const name of (await readdir(dir).catch(() => [])).filter((n) => n.endsWith('.json'))) {
        const record = JSON.parse(await readFile(join(dir, name), 'utf8')) as { port: number; token: string };
        const answer = await fetch(`http://127.0.0.1:${record.port}/sim/stats`, { headers: { authorization: `Bearer ${record.token}` } }).catch(() => null);
        if (answer?.ok) total += ((await answer.json()) as SimStats).requests;
      }
    }
    return total;
  };

  const chatLine = (i: number) =>
    JSON.stringify({
      custom_id: `row-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'sim-chat', messages: [{ role: 'user', content: `n ${i}` }], max_tokens: 3 },
    });

  const upload = async (lines: string[]) =>
    (await client.files.create({ file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'input.jsonl'), purpose: 'batch' })).id;

  const until = async (id: string, done: (b: OpenAI.Batches.Batch) => boolean, what: string, timeoutMs = 90_000) =>
    await waitFor(
      async () => {
        const batch = await client.batches.retrieve(id);
        return done(batch) ? batch : null;
      },
      { timeoutMs, intervalMs: 100, what },
    );

  const contentLines = async (fileId: string) =>
    (await (await client.files.content(fileId)).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, any>);

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    await seedDemoDeployment(plane, 1, { loadMs: 100, tokensPerSecond: 200 }, { maxConcurrency: 8 });
    nodes = [await startSimNode(plane, 'batch-node', join(plane.dataDir, 'nodes'))];
    client = new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: plane.adminToken, maxRetries: 0 });
    await waitFor(
      async () =>
        await client.chat.completions
          .create({ model: 'sim-chat', messages: [{ role: 'user', content: 'ping' }], max_tokens: 1 })
          .then(() => true)
          .catch(() => false),
      { timeoutMs: 60_000, intervalMs: 300, what: 'sim-chat to answer' },
    );
  }, 120_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('runs a batch through the official SDK: one output line per good row in input order, one error line per bad row', async () => {
    const good = Array.from({ length: 40 }, (_, i) => chatLine(i));
    const bad = [
      '{"custom_id": "broken", "method": "POST", "url": ',
      JSON.stringify({ custom_id: 'elsewhere', method: 'POST', url: '/v1/embeddings', body: { model: 'sim-chat', input: 'x' } }),
      JSON.stringify({ custom_id: 'no-model', method: 'POST', url: '/v1/chat/completions', body: { messages: [] } }),
      JSON.stringify({
        custom_id: 'unknown-model',
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'nope', messages: [{ role: 'user', content: 'x' }] },
      }),
    ];
    const inputFileId = await upload([...good.slice(0, 20), ...bad, ...good.slice(20)]);
    const created = await client.batches.create({
      input_file_id: inputFileId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      metadata: { team: 'evals' },
    });
    expect(created).toMatchObject({ object: 'batch', status: 'validating', input_file_id: inputFileId, metadata: { team: 'evals' } });
    const done = await until(created.id, (b) => b.status === 'completed' || b.status === 'failed', 'the batch to complete');
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 44, completed: 40, failed: 4 });
    expect(done.in_progress_at).toBeGreaterThanOrEqual(done.created_at);
    expect(done.completed_at).toBeGreaterThanOrEqual(done.finalizing_at!);

    const output = await contentLines(done.output_file_id!);
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: 40 }, (_, i) => `row-${i}`));
    for (const line of output) {
      expect(line.response.status_code).toBe(200);
      expect(line.response.body.choices[0].message.content.length).toBeGreaterThan(0);
      expect(line.error).toBeNull();
    }
    const errors = await contentLines(done.error_file_id!);
    expect(errors.map((l) => l.custom_id)).toEqual([null, 'elsewhere', 'no-model', 'unknown-model']);
    expect(errors.slice(0, 3).map((l) => l.error.code)).toEqual(['invalid_json', 'url_mismatch', 'invalid_request']);
    // A row the endpoint refused keeps its answer: the status and OpenAI's error envelope.
    expect(errors[3]!.response.status_code).toBe(404);
    expect(errors[3]!.response.body.error.param).toBe('model');

    const listed = await client.batches.list({ limit: 10 });
    expect(listed.data.map((b) => b.id)).toContain(created.id);
    // Output files are the workspace's files, of purpose batch_output.
    expect((await client.files.retrieve(done.output_file_id!)).purpose).toBe('batch_output');
  });

  it('resumes a batch whose runner was killed from its checkpoint, without sending a checkpointed row again', async () => {
    const rows = 400;
    const inputFileId = await upload(Array.from({ length: rows }, (_, i) => chatLine(i)));
    const before = await runtimeRequests();
    const batch = await client.batches.create({ input_file_id: inputFileId, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const [{ pid, attempt }] = await waitFor(
      async () => {
        const [row] = await plane.systemCtx.db.select({ doneRows: jobs.doneRows, attempt: jobs.attempt }).from(jobs).where(eq(jobs.id, batch.id));
        if (!row || row.doneRows < rows / 4) return null;
        const runner = await runnerOf(batch.id);
        return runner ? [{ pid: runner, attempt: row.attempt }] : null;
      },
      { timeoutMs: 60_000, intervalMs: 20, what: 'a quarter of the rows done' },
    );
    expect(attempt).toBe(0);
    process.kill(pid, 'SIGKILL');
    const done = await until(batch.id, (b) => b.status === 'completed' || b.status === 'failed', 'the batch to complete after the kill');
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: rows, completed: rows, failed: 0 });
    const [row] = await plane.systemCtx.db.select({ attempt: jobs.attempt }).from(jobs).where(eq(jobs.id, batch.id));
    expect(row!.attempt).toBe(1);
    const output = await contentLines(done.output_file_id!);
    expect(output.map((l) => l.custom_id)).toEqual(Array.from({ length: rows }, (_, i) => `row-${i}`));
    // Sent again only what the killed runner had not had acknowledged: its rows in flight and its unsent results.
    const sent = (await runtimeRequests()) - before;
    console.log(`batch of ${rows} rows, runner killed after ${rows / 4}+ rows: the runtime answered ${sent} requests (${sent - rows} sent again)`);
    expect(sent).toBeGreaterThanOrEqual(rows);
    expect(sent - rows).toBeLessThanOrEqual(16 + 200);
  });

  it('cancels a running batch: it stops and keeps the rows it finished', async () => {
    const rows = 2_000;
    const inputFileId = await upload(Array.from({ length: rows }, (_, i) => chatLine(i)));
    const batch = await client.batches.create({ input_file_id: inputFileId, endpoint: '/v1/chat/completions', completion_window: '24h' });
    await until(batch.id, (b) => b.request_counts!.completed > 20, 'some rows done');
    const cancelling = await client.batches.cancel(batch.id);
    expect(['cancelling', 'cancelled']).toContain(cancelling.status);
    const ended = await until(batch.id, (b) => b.status === 'cancelled', 'the batch to be cancelled');
    const kept = ended.request_counts!.completed;
    expect(kept).toBeGreaterThan(20);
    expect(kept).toBeLessThan(rows);
    expect(await contentLines(ended.output_file_id!)).toHaveLength(kept);
    expect(ended.cancelled_at).toBeGreaterThanOrEqual(ended.cancelling_at!);
    // Ended: a second cancel is refused in OpenAI's envelope.
    await expect(client.batches.cancel(batch.id)).rejects.toMatchObject({ status: 409 });
  });

  const waitJob = async (id: string) =>
    await waitFor(
      async () => {
        const job = JobView.parse(await (await plane.admin(`/api/v1/jobs/${id}`)).json());
        return ['completed', 'failed', 'cancelled', 'expired'].includes(job.state) ? job : null;
      },
      { timeoutMs: 90_000, intervalMs: 100, what: `job ${id} to end` },
    );

  it('runs a built-in chat job over JSONL rows: one output line per input row, in order, a bad row its error', async () => {
    const rows = [
      ...Array.from({ length: 30 }, (_, i) => JSON.stringify({ custom_id: `q-${i}`, messages: [{ role: 'user', content: `question ${i}` }], label: 'mine' })),
      JSON.stringify({ custom_id: 'empty' }),
      JSON.stringify({ messages: [{ role: 'user', content: 'no id' }], temperature: 0.5 }),
    ];
    const inputFileId = (await client.files.create({ file: await toFile(Buffer.from(rows.join('\n')), 'questions.jsonl'), purpose: 'user_data' })).id;
    const submitted = await plane.admin('/api/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rows: { kind: 'chat', model: 'sim-chat', defaults: { max_tokens: 3 } }, inputFileId, format: 'jsonl' }),
    });
    expect(submitted.status, await submitted.clone().text()).toBe(201);
    const job = await waitJob(JobView.parse(await submitted.json()).id);
    expect(job).toMatchObject({ kind: 'rows', state: 'completed', rows: { total: 32, succeeded: 31, failed: 1 }, errorFileId: null });
    const output = await contentLines(job.outputFileId!);
    expect(output.map((l) => l.custom_id)).toEqual([...Array.from({ length: 30 }, (_, i) => `q-${i}`), 'empty', '31']);
    expect(output[30]!.error.code).toBe('invalid_request');
    expect(output[31]!.response.status_code).toBe(200);
    // A bad default is refused once, at submission, not row by row.
    const refused = await plane.admin('/api/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rows: { kind: 'chat', model: 'sim-chat', defaults: { temperature: 5 } }, inputFileId, format: 'jsonl' }),
    });
    expect(refused.status).toBe(400);
  });

  it('runs a completion job over Parquet rows with the CLI, its output Parquet in input order', async () => {
    const rows = Array.from({ length: 300 }, (_, i) => ({ custom_id: `p-${i}`, prompt: `complete ${i}` }));
    const parquet = writeParquetRows(
      rows,
      [
        { name: 'custom_id', type: 'STRING' },
        { name: 'prompt', type: 'STRING' },
      ],
      { rowGroupSize: 64 },
    );
    const inputFileId = (await client.files.create({ file: await toFile(Buffer.from(parquet), 'prompts.parquet'), purpose: 'user_data' })).id;
    const dir = join(plane.dataDir, 'cli');
    await mkdir(dir, { recursive: true });
    const cli = await buildCli(dir);
    const env = { LUNANEXA_URL: plane.url, LUNANEXA_TOKEN: plane.adminToken, HOME: dir, LUNANEXA_CONFIG: join(dir, 'login.json') };
    await writeFile(
      join(dir, 'job.yaml'),
      `rows:\n  kind: completion\n  model: sim-chat\n  defaults:\n    max_tokens: 2\ninputFileId: ${inputFileId}\nformat: parquet\n`,
    );
    const submitted = await runCli(cli, ['jobs', 'submit', '-f', join(dir, 'job.yaml'), '--wait', '--json'], env);
    expect(submitted.code, submitted.stderr).toBe(0);
    const job = JobView.parse(JSON.parse(submitted.stdout));
    expect(job).toMatchObject({ state: 'completed', rows: { total: 300, succeeded: 300, failed: 0 } });
    const listed = await runCli(cli, ['jobs', 'ls'], env);
    expect(listed.stdout).toMatch(new RegExp(`${job.id}\\s+rows\\s+completed\\s+300 of 300 rows`));
    const output = Buffer.from(await (await client.files.content(job.outputFileId!)).arrayBuffer());
    expect((await client.files.retrieve(job.outputFileId!)).filename).toBe(`${job.id}_output.parquet`);
    const back = await readParquetRows(output, { rowStart: 0, rowEnd: 300 });
    expect(back.map((r) => r.custom_id)).toEqual(rows.map((r) => r.custom_id));
    expect((JSON.parse(back[299]!.response as string) as { status_code: number }).status_code).toBe(200);
    expect(back.every((r) => r.error === null)).toBe(true);
  });

  it('refuses bad batches with a 4xx in OpenAI’s envelope and creates nothing', async () => {
    const userData = (await client.files.create({ file: await toFile(Buffer.from('{}\n'), 'notes.jsonl'), purpose: 'user_data' })).id;
    const count = async () => (await plane.systemCtx.db.select({ id: jobs.id }).from(jobs)).length;
    const before = await count();
    const post = (body: unknown) =>
      fetch(`${plane.url}/v1/batches`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const cases: Array<[unknown, number]> = [
      [{ input_file_id: 'file_01ARZ3NDEKTSV4RRFFQ69G5FAV', endpoint: '/v1/chat/completions', completion_window: '24h' }, 404],
      [{ input_file_id: userData, endpoint: '/v1/chat/completions', completion_window: '24h' }, 400],
      [{ input_file_id: userData, endpoint: '/v1/responses', completion_window: '24h' }, 400],
      [{ input_file_id: userData, endpoint: '/v1/chat/completions', completion_window: '48h' }, 400],
      [{ endpoint: '/v1/chat/completions', completion_window: '24h' }, 400],
      [
        {
          input_file_id: userData,
          endpoint: '/v1/chat/completions',
          completion_window: '24h',
          metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])),
        },
        400,
      ],
    ];
    for (const [body, status] of cases) {
      const answer = await post(body);
      expect(answer.status, JSON.stringify(body)).toBe(status);
      expect(((await answer.json()) as { error: { message: string } }).error.message.length).toBeGreaterThan(0);
    }
    const raw = await fetch(`${plane.url}/v1/batches`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: '{',
    });
    expect(raw.status).toBe(400);
    expect((await fetch(`${plane.url}/v1/batches/job_01ARZ3NDEKTSV4RRFFQ69G5FAV`, { headers: { authorization: `Bearer ${plane.adminToken}` } })).status).toBe(
      404,
    );
    expect((await fetch(`${plane.url}/v1/batches/not-an-id/cancel`, { method: 'POST', headers: { authorization: `Bearer ${plane.adminToken}` } })).status).toBe(
      404,
    );
    expect((await fetch(`${plane.url}/v1/batches`, { method: 'POST', body: '{}' })).status).toBe(401);
    expect(await count()).toBe(before);
  });

  it("refuses a runner's routes to any token but the job's current runner's", async () => {
    const [job] = await plane.systemCtx.db.select({ id: jobs.id }).from(jobs).limit(1);
    const auth = { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' };
    expect((await fetch(`${plane.url}/v1/jobs/${job!.id}/runner`, { headers: auth })).status).toBe(404);
    const checkpoint = { attempt: 0, results: [{ row: 0, ok: true, line: '{}' }] };
    expect(
      (await fetch(`${plane.url}/v1/jobs/${job!.id}/runner/checkpoints`, { method: 'POST', headers: auth, body: JSON.stringify(checkpoint) })).status,
    ).toBe(404);
    expect((await fetch(`${plane.url}/v1/jobs/${job!.id}/runner/done`, { method: 'POST', headers: auth, body: '{"attempt":0,"totalRows":1}' })).status).toBe(
      404,
    );
    expect(
      (await fetch(`${plane.url}/v1/jobs/${job!.id}/runner/checkpoints`, { method: 'POST', headers: auth, body: '{"attempt":0,"results":[]}' })).status,
    ).toBe(400);
  });
});

/** The pid of the runner process of job `jobId`, from the processes' environments; null while it has none. */
async function runnerOf(jobId: string): Promise<number | null> {
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.includes('lunanexa-runner.mjs')) continue;
    const environ = await readFile(`/proc/${entry}/environ`, 'utf8').catch(() => '');
    if (environ.split('\0').includes(`LUNANEXA_JOB_ID=${jobId}`)) return Number(entry);
  }
  return null;
}
