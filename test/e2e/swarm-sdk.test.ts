import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Swarm, type JobView } from '@lunanexa/sdk';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { buildCli, runCli } from '../helpers/cli.js';
import { SwarmDown, SwarmView } from '../../shared/contracts/swarm.js';
import { JobView as JobViewContract } from '../../shared/batch/job.js';

/**
 * Swarms end to end (docs/jobs.md, "Swarms"): the SDK (`@lunanexa/sdk`, as a user imports it) brings a swarm up on a
 * real plane with a real simulated agent, waits until it serves, runs a JSONL rows job through it on the `local`
 * backend and downloads its output; `await using` brings it down when its scope ends, however it ends, unless
 * `deleteOnExit: false`. The CLI (`swarm up|ls|status|down`, `job submit --swarm`) drives the same plane.
 */
describe('swarms through the SDK and the CLI', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let dir: string;
  let options: { url: string; token: string; pollMs: number; timeoutMs: number };

  /** A swarm serving a simulated model named after it, on the sim nodes. */
  const config = (name: string) => ({
    name,
    deployment: {
      model: name,
      runtime: { kind: 'simulated' as const, model: name, ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 256, failureRate: 0 },
      replicas: 1,
      selector: { sim: 'true' },
      memoryMiB: 256,
    },
    jobs: { concurrency: 4 },
  });
  const exists = async (path: string) => (await plane.admin(path)).status !== 404;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    dir = join(plane.dataDir, 'swarm-sdk');
    await mkdir(dir, { recursive: true });
    nodes = [await startSimNode(plane, 'swarm-node', join(plane.dataDir, 'nodes'))];
    options = { url: plane.url, token: plane.adminToken, pollMs: 200, timeoutMs: 90_000 };
  }, 120_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('brings a swarm up with `await using`, runs a JSONL job through it and downloads one output line per row; the scope’s end brings it down', async () => {
    const input = join(dir, 'questions.jsonl');
    const output = join(dir, 'answers.jsonl');
    const rows = Array.from({ length: 12 }, (_, i) => ({ custom_id: `q-${i}`, messages: [{ role: 'user', content: `question ${i}` }] }));
    await writeFile(input, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
    const seen: JobView[] = [];
    {
      await using swarm = await Swarm.up(config('sdk-chat'), options);
      expect(swarm.view.status).toBe('ready');
      expect(swarm.endpoint).toBe(`${plane.url}/v1`);
      expect(swarm.model).toBe('sdk-chat');
      // Its endpoint serves its model to any OpenAI client.
      const chat = await fetch(`${swarm.endpoint}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: swarm.model, messages: [{ role: 'user', content: 'ping' }], max_tokens: 2 }),
      });
      expect(chat.status, await chat.clone().text()).toBe(200);

      const job = await swarm.submitJob({ rows: { kind: 'chat', defaults: { max_tokens: 3 } } }, { input, output });
      const done = await job.wait({ onProgress: (j) => seen.push(j), intervalMs: 200 });
      expect(done).toMatchObject({ state: 'completed', rows: { total: 12, succeeded: 12, failed: 0 } });
      expect(done.spec).toMatchObject({ backend: 'local', concurrency: 4, rows: { kind: 'chat', model: 'sdk-chat' } });
      expect((await swarm.refresh()).jobs).toMatchObject({ total: 1, completed: 1 });
    }
    expect(seen.at(-1)?.state).toBe('completed');
    const lines = (await readFile(output, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } });
    expect(lines.map((l) => l.custom_id)).toEqual(rows.map((r) => r.custom_id));
    expect(lines.every((l) => l.response.status_code === 200)).toBe(true);
    // Down when the scope ended: no swarm, no deployment.
    expect(await exists('/api/v1/swarms/sdk-chat')).toBe(false);
    expect(await exists('/api/v1/deployments/sdk-chat')).toBe(false);
  });

  it('brings the swarm down when its scope throws', async () => {
    const failing = async () => {
      await using swarm = await Swarm.up(config('sdk-throws'), { ...options, wait: false });
      expect(await exists(`/api/v1/swarms/${swarm.name}`)).toBe(true);
      throw new Error('the work failed');
    };
    await expect(failing()).rejects.toThrow('the work failed');
    expect(await exists('/api/v1/swarms/sdk-throws')).toBe(false);
    expect(await exists('/api/v1/deployments/sdk-throws')).toBe(false);
  });

  it('keeps a swarm with deleteOnExit: false, reads it back with Swarm.fromState, and the CLI lists, shows, uses and downs it', async () => {
    {
      await using swarm = await Swarm.up(config('sdk-kept'), { ...options, deleteOnExit: false });
      expect(swarm.view.replicas.ready).toBe(1);
    }
    const back = await Swarm.fromState('sdk-kept', options);
    expect(back.view).toMatchObject({ name: 'sdk-kept', status: 'ready', deployment: 'sdk-kept', model: 'sdk-kept' });
    expect(back.deleteOnExit).toBe(false);

    const cli = await buildCli(dir);
    const env = { LUNANEXA_URL: plane.url, LUNANEXA_TOKEN: plane.adminToken, HOME: dir, LUNANEXA_CONFIG: join(dir, 'login.json') };
    // Up again from a file, as it is: nothing changes, and it serves at once.
    await writeFile(join(dir, 'swarm.yaml'), JSON.stringify(config('sdk-kept')));
    const up = await runCli(cli, ['swarm', 'up', '-f', join(dir, 'swarm.yaml'), '--wait', '--json'], env);
    expect(up.code, up.stderr).toBe(0);
    expect(SwarmView.parse(JSON.parse(up.stdout)).updatedAt).toBe(back.view.updatedAt);

    const listed = await runCli(cli, ['swarm', 'ls'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/sdk-kept\s+ready\s+1\/1\s+sdk-kept\s+sdk-kept\s+0\s/);

    const { spec } = await (await back.submitJob({ rows: { kind: 'chat', defaults: { max_tokens: 2 } } }, { input: join(dir, 'questions.jsonl') })).wait();
    const inputFileId = spec.kind === 'rows' ? spec.inputFileId : '';
    await writeFile(join(dir, 'job.yaml'), `rows:\n  kind: chat\n  defaults:\n    max_tokens: 2\ninputFileId: ${inputFileId}\n`);
    const submitted = await runCli(cli, ['job', 'submit', '--swarm', 'sdk-kept', '-f', join(dir, 'job.yaml'), '--wait', '--json'], env);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(JobViewContract.parse(JSON.parse(submitted.stdout))).toMatchObject({ state: 'completed', spec: { rows: { model: 'sdk-kept' } } });

    const status = await runCli(cli, ['swarm', 'status', 'sdk-kept'], env);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain('status:     ready: 1/1 ready');
    expect(status.stdout).toContain(`endpoint:   ${plane.url}/v1 (model sdk-kept)`);
    expect(status.stdout).toContain('jobs:       2 (2 completed)');

    const down = await runCli(cli, ['swarm', 'down', 'sdk-kept', '--json'], env);
    expect(down.code, down.stderr).toBe(0);
    expect(SwarmDown.parse(JSON.parse(down.stdout))).toEqual({ name: 'sdk-kept', deleted: true, cancelledJobs: [], deploymentDeleted: true });
    expect(await exists('/api/v1/deployments/sdk-kept')).toBe(false);
    const gone = await runCli(cli, ['swarm', 'status', 'sdk-kept'], env);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain('HTTP 404');
    // Read back after it is down: the SDK says so, and disposing of it again is a no-op.
    await expect(Swarm.fromState('sdk-kept', options)).rejects.toMatchObject({ status: 404 });
    expect(await back.delete()).toBe(false);
  });
});
