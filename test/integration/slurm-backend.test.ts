import { createHash, randomBytes } from 'node:crypto';
import { JobSpec } from '../../shared/batch/job.js';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ComputeBackend, RunnerLaunch } from '../../functions/hosts/jobs/compute.js';
import { slurmBackend } from '../../functions/hosts/jobs/slurm.js';
import { configFromEnv, NodeEnv } from '../../functions/hosts/node-env.js';
import { JobsSlurmConfig } from '../../functions/kernel/config.js';
import { type SlurmCluster, slurmUnavailable, startSlurm } from '../helpers/slurm.js';

const run = promisify(execFile);
const FIXTURE = fileURLToPath(new URL('../fixtures/slurm-runner.mjs', import.meta.url));
const unavailable = slurmUnavailable();

it('reads the Slurm backend from LUNANEXA_JOBS_SLURM_*, off unless one is set, and refuses one without a log directory', () => {
  const env = (vars: Record<string, string>) => configFromEnv(NodeEnv.parse(vars)).jobsSlurm;
  expect(env({})).toBeNull();
  expect(
    env({
      LUNANEXA_JOBS_SLURM_LOG_DIR: '/shared/lunanexa/jobs',
      LUNANEXA_JOBS_SLURM_PARTITION: 'gpu',
      LUNANEXA_JOBS_SLURM_ARGS: ' --time=04:00:00  --qos=batch ',
      LUNANEXA_JOBS_SLURM_COMMAND: '/opt/node/bin/node /opt/lunanexa/bin/lunanexa-runner.mjs',
      LUNANEXA_JOBS_SLURM_MEMORY_MIB: '4096',
    }),
  ).toEqual({
    logDir: '/shared/lunanexa/jobs',
    partition: 'gpu',
    extraArgs: ['--time=04:00:00', '--qos=batch'],
    command: ['/opt/node/bin/node', '/opt/lunanexa/bin/lunanexa-runner.mjs'],
    memoryMiB: 4096,
    runners: 8,
    cpus: 1,
  });
  expect(() => env({ LUNANEXA_JOBS_SLURM_PARTITION: 'gpu' })).toThrow(/logDir/);
  expect(() => env({ LUNANEXA_JOBS_SLURM_LOG_DIR: 'relative/logs' })).toThrow(/absolute/);
  expect(() => env({ LUNANEXA_JOBS_SLURM_LOG_DIR: '/logs/%u' })).toThrow(/absolute/);
  expect(slurmBackend(null)).toBeNull();
});

describe.skipIf(unavailable !== null && !process.env.CI)(`the slurm backend against a real Slurm${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  let cluster: SlurmCluster;
  let dir: string;
  let backend: ComputeBackend;
  let config: JobsSlurmConfig;
  let startMs = 0;

  beforeAll(async () => {
    const t0 = Date.now();
    cluster = await startSlurm();
    startMs = Date.now() - t0;
    dir = await mkdtemp(join(tmpdir(), 'lnx-slurm-jobs-'));
    config = JobsSlurmConfig.parse({ logDir: join(dir, 'logs'), partition: cluster.partition, memoryMiB: 256, command: [process.execPath, FIXTURE] });
    // The Slurm commands as the backend runs them, each through a shim that writes down its argv: the commands
    // exit in milliseconds, before any look at /proc would find them.
    await mkdir(join(dir, 'bin'));
    for (const tool of ['sbatch', 'scontrol', 'scancel']) {
      const real = (await run('sh', ['-c', `command -v ${tool}`])).stdout.trim();
      await writeFile(join(dir, 'bin', tool), `#!/bin/sh\nprintf '%s\\n' "$0 $*" >> ${join(dir, 'argv.log')}\nexec ${real} "$@"\n`, { mode: 0o755 });
    }
    // A variable of the control plane's own beside the ones Slurm needs: it must reach no job.
    backend = slurmBackend(config, { binDir: join(dir, 'bin'), env: { ...cluster.env, DATABASE_URL: 'postgres://plane:secret@db/plane' }, pollMs: 100 });
  });
  afterAll(async () => {
    await cluster?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  let jobs = 0;
  const launch = (token = randomBytes(32).toString('hex')): RunnerLaunch => {
    const jobId = `job_test${++jobs}`;
    return {
      jobId,
      attempt: 0,
      workspaceId: 'ws_test',
      env: { LUNANEXA_URL: 'http://127.0.0.1:9/', LUNANEXA_JOB_ID: jobId, LUNANEXA_JOB_TOKEN: token, FIXTURE_DIR: dir },
      spec: JobSpec.parse({ kind: 'rows', rows: { kind: 'chat', model: 'm' }, inputFileId: 'file_x', format: 'jsonl', backend: 'slurm' }),
    };
  };
  /** What the fixture said once Slurm started it. */
  const started = async (jobId: string) => {
    const file = join(dir, `${jobId}.started`);
    const deadline = Date.now() + 20_000;
    while (!existsSync(file)) {
      if (Date.now() > deadline) throw new Error(`the runner of ${jobId} did not start within 20 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return JSON.parse(await readFile(file, 'utf8')) as { pid: number; names: string[]; tokenSha256: string; slurmJobId: string };
  };
  const release = (jobId: string, code: number) => writeFile(join(dir, `${jobId}.release`), String(code));
  const waitFor = (handle: string) => backend.wait(handle, AbortSignal.timeout(30_000));
  /** Every process's argv on this machine, as `ps` would show it. */
  const argvs = async () => {
    const all: string[] = [];
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (cmdline) all.push(cmdline.replaceAll('\0', ' '));
    }
    return all;
  };

  it('starts in seconds, one idle node', () => {
    console.log(`slurm: started in ${startMs} ms`);
    expect(startMs).toBeLessThan(30_000);
  });

  it('runs a runner to its exit code 0 with its variables, none of the plane, and its token on no argv and in no log', async () => {
    const job = launch();
    const token = job.env.LUNANEXA_JOB_TOKEN!;
    const handle = await backend.submit(job);
    expect(handle).toMatch(/^\d+$/);
    expect(['queued', 'running']).toContain((await backend.probe(handle)).state);

    const seen = await started(job.jobId);
    expect(seen.slurmJobId).toBe(handle);
    expect(await backend.probe(handle)).toEqual({ state: 'running' });
    expect(seen.names).toEqual(expect.arrayContaining(['LUNANEXA_URL', 'LUNANEXA_JOB_ID', 'LUNANEXA_JOB_TOKEN', 'PATH']));
    expect(seen.names).not.toContain('DATABASE_URL');
    expect(seen.tokenSha256).toBe(createHash('sha256').update(token).digest('hex'));
    // The batch script exec'd the runner: the process is the configured command itself, and its environment holds the token.
    expect((await readFile(`/proc/${seen.pid}/cmdline`, 'utf8')).split('\0').filter(Boolean)).toEqual([process.execPath, FIXTURE]);
    expect(await readFile(`/proc/${seen.pid}/environ`, 'utf8')).toContain(`LUNANEXA_JOB_TOKEN=${token}`);
    const all = await argvs();
    expect(all.some((argv) => argv.includes(FIXTURE))).toBe(true);
    expect(all.filter((argv) => argv.includes(token))).toEqual([]);

    await release(job.jobId, 0);
    expect(await waitFor(handle)).toEqual({ kind: 'exited', code: 0, signal: null });
    expect(await backend.probe(handle)).toEqual({ state: 'ended', end: { kind: 'exited', code: 0, signal: null } });

    const log = await readFile(join(config.logDir, `lunanexa-${job.jobId}-0-${handle}.log`), 'utf8');
    expect(log).toContain('LUNANEXA_JOB_TOKEN');
    const script = (await run('scontrol', ['write', 'batch_script', handle, '-'], { env: cluster.env })).stdout;
    expect(script).toContain(FIXTURE);
    const shown = (await run('scontrol', ['show', 'job', handle], { env: cluster.env })).stdout;
    const slurmLogs = await Promise.all((await readdir(join(cluster.dir, 'logs'))).map((f) => readFile(join(cluster.dir, 'logs', f), 'utf8')));
    expect(slurmLogs.join('\n')).toContain(`JobId=${handle}`);
    const commands = await readFile(join(dir, 'argv.log'), 'utf8');
    expect(commands).toMatch(/\/sbatch --parsable .*--export=ALL/);
    expect(commands).toContain(`/scontrol show job --oneliner ${handle}`);
    for (const text of [log, script, shown, commands, ...slurmLogs]) expect(text).not.toContain(token);
  });

  it('ends a failing runner with its exit code', async () => {
    const job = launch();
    const handle = await backend.submit(job);
    await started(job.jobId);
    await release(job.jobId, 3);
    expect(await waitFor(handle)).toEqual({ kind: 'exited', code: 3, signal: null });
    expect(await backend.probe(handle)).toEqual({ state: 'ended', end: { kind: 'exited', code: 3, signal: null } });
  });

  it('cancels a running runner: it ends killed by SIGTERM', async () => {
    const job = launch();
    const handle = await backend.submit(job);
    const { pid } = await started(job.jobId);
    const ended = waitFor(handle);
    await backend.cancel(handle);
    expect(await ended).toEqual({ kind: 'exited', code: null, signal: 'SIGTERM' });
    expect(await backend.probe(handle)).toEqual({ state: 'ended', end: { kind: 'exited', code: null, signal: 'SIGTERM' } });
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    // Cancelling what already ended is no error: the host may cancel a runner as it ends.
    await backend.cancel(handle);
  });

  it('sees a held job queued, and one cancelled before it started ends with neither code nor signal', async () => {
    const held = slurmBackend({ ...config, extraArgs: ['--hold'] }, { env: cluster.env, pollMs: 100 });
    const job = launch();
    const handle = await held.submit(job);
    for (let i = 0; i < 5; i++) {
      expect(await held.probe(handle)).toEqual({ state: 'queued' });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await held.cancel(handle);
    expect(await held.wait(handle, AbortSignal.timeout(10_000))).toEqual({ kind: 'exited', code: null, signal: null });
    expect(existsSync(join(dir, `${job.jobId}.started`))).toBe(false);
  });

  it('probes an id Slurm does not know as gone, and refuses a handle that is not a Slurm id', async () => {
    expect(await backend.probe('987654')).toEqual({ state: 'gone' });
    expect(await waitFor('987654')).toEqual({ kind: 'lost' });
    await backend.cancel('987654');
    await expect(backend.probe('--all')).rejects.toThrow(/not a Slurm job id/);
    await expect(backend.cancel('1;scancel --user=root')).rejects.toThrow(/not a Slurm job id/);
  });

  it("runs this checkout's runner by default: with no control plane at its URL it exits 1 and says why, without its token", async () => {
    const { command: _fixture, ...defaults } = config;
    const real = slurmBackend(defaults, { env: cluster.env, pollMs: 100 });
    const job = launch();
    const handle = await real.submit(job);
    expect(await real.wait(handle, AbortSignal.timeout(30_000))).toEqual({ kind: 'exited', code: 1, signal: null });
    const log = await readFile(join(config.logDir, `lunanexa-${job.jobId}-0-${handle}.log`), 'utf8');
    expect(log).toMatch(/^runner: fetch failed/m);
    expect(log).not.toContain(job.env.LUNANEXA_JOB_TOKEN!);
  });

  it('says why sbatch refused a job, from its stderr', async () => {
    const wrong = slurmBackend({ ...config, partition: 'no-such-partition' }, { env: cluster.env });
    await expect(wrong.submit(launch())).rejects.toThrow(/sbatch .*exited with code 1: .*invalid partition/i);
  });

  it('keeps waiting through a slurmctld restart, and the job is still there after it; an aborted wait rejects', async () => {
    const job = launch();
    const handle = await backend.submit(job);
    await started(job.jobId);
    const aborted = new AbortController();
    const abandoned = backend.wait(handle, aborted.signal);
    const ended = waitFor(handle);
    await cluster.stopController();
    // No answer is no news: the probe fails, it does not say `gone`.
    await expect(backend.probe(handle)).rejects.toThrow(/scontrol .*(contact|connect)/i);
    aborted.abort(new Error('the host stopped'));
    await expect(abandoned).rejects.toThrow('the host stopped');
    await release(job.jobId, 0);
    await new Promise((resolve) => setTimeout(resolve, 500));
    await cluster.startController();
    expect(await ended).toEqual({ kind: 'exited', code: 0, signal: null });
  });

  it('gives up waiting once Slurm has not answered for its patience', async () => {
    const impatient = slurmBackend(config, { env: cluster.env, pollMs: 100, unreachableMs: 500 });
    const job = launch();
    const handle = await impatient.submit(job);
    await started(job.jobId);
    await cluster.stopController();
    try {
      await expect(impatient.wait(handle, AbortSignal.timeout(20_000))).rejects.toThrow(/scontrol/);
    } finally {
      await cluster.startController();
      await release(job.jobId, 0);
    }
  });
});
