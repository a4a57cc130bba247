import { describe, expect, it } from 'vitest';
import { mkdir, mkdtemp, readdir, utimes, writeFile } from 'node:fs/promises';
import { tmpdir, type NetworkInterfaceInfo } from 'node:os';
import { join } from 'node:path';
import type { TemplateRuntime, WorkerAssignment } from '../../shared/contracts/desired.js';
import { MAX_MACHINE_WORKERS } from '../../shared/contracts/worker.js';
import { AgentPolicy, templateRefusal, WORKER_PLATFORM_ENV } from '../../agent/policy.js';
import { machineAddress } from '../../agent/reporter/address.js';
import { MachineHolds } from '../../agent/runtimes/holds.js';
import { workerEnv } from '../../agent/runtimes/launch.js';
import { exitReport, planWorkers, workerReports, type WorkerView } from '../../agent/workers/plan.js';
import { workerLogPath, workersDir } from '../../agent/workers/records.js';
import { WorkerSupervisor } from '../../agent/workers/supervisor.js';

const DIGEST = 'a'.repeat(64);
const command = (env: Record<string, string> = {}): TemplateRuntime => ({
  kind: 'template',
  template: 'trainer',
  executable: '/opt/train/bin/train',
  executableSha256: DIGEST,
  args: ['--epochs', '3'],
  env,
  healthPath: '/health',
});
const assignment = (workerId: string, attempt: number, phase: 'prepare' | 'start'): WorkerAssignment => ({
  workerId,
  runId: 'run_1',
  name: `run_1-${workerId}`,
  attempt,
  command: command(),
  resources: { gpus: 1, cores: 1, memoryMiB: 1024 },
  phase,
});
const view = (workerId: string, attempt: number, state: WorkerView['state'], busy = false): WorkerView => ({ workerId, attempt, state, busy });

describe('planWorkers', () => {
  it('prepares a new worker, and starts it only once prepared and its phase says start', () => {
    expect(planWorkers([assignment('w1', 0, 'prepare')], [])).toEqual([{ type: 'prepare', assignment: assignment('w1', 0, 'prepare') }]);
    expect(planWorkers([assignment('w1', 0, 'prepare')], [view('w1', 0, 'ready-to-start')])).toEqual([]);
    expect(planWorkers([assignment('w1', 0, 'start')], [view('w1', 0, 'ready-to-start')])).toEqual([
      { type: 'start', assignment: assignment('w1', 0, 'start') },
    ]);
    expect(planWorkers([assignment('w1', 0, 'start')], [view('w1', 0, 'preparing', true)])).toEqual([]);
  });

  it('never restarts a worker that ended: only a higher attempt replaces it; a lower one changes nothing', () => {
    for (const state of ['completed', 'failed', 'running'] as const) expect(planWorkers([assignment('w1', 2, 'start')], [view('w1', 2, state)])).toEqual([]);
    expect(planWorkers([assignment('w1', 3, 'start')], [view('w1', 2, 'running')])).toEqual([{ type: 'replace', assignment: assignment('w1', 3, 'start') }]);
    expect(planWorkers([assignment('w1', 1, 'start')], [view('w1', 2, 'running')])).toEqual([]);
    // Busy: the replacement waits for the work in progress.
    expect(planWorkers([assignment('w1', 3, 'start')], [view('w1', 2, 'starting', true)])).toEqual([]);
  });

  it('stops a worker that left the desired state', () => {
    expect(planWorkers([], [view('w1', 0, 'running'), view('w2', 0, 'failed', true)])).toEqual([{ type: 'stop', workerId: 'w1' }]);
  });
});

describe('worker reports', () => {
  it('completes a worker that exits 0 and fails any other end', () => {
    expect(exitReport(0, null)).toEqual({ state: 'completed', exitCode: 0, message: null });
    expect(exitReport(3, null)).toEqual({ state: 'failed', exitCode: 3, message: 'exited with code 3' });
    expect(exitReport(null, 'SIGKILL')).toEqual({ state: 'failed', exitCode: null, message: 'killed by SIGKILL' });
  });

  it('sorts by worker id within the heartbeat bound', () => {
    const reports = Array.from({ length: MAX_MACHINE_WORKERS + 5 }, (_, i) => ({
      workerId: `w${String(1000 - i).padStart(4, '0')}`,
      attempt: 0,
      state: 'running' as const,
      exitCode: null,
      message: null,
    }));
    const out = workerReports(reports);
    expect(out).toHaveLength(MAX_MACHINE_WORKERS);
    expect(out[0]!.workerId).toBe(`w0${1000 - MAX_MACHINE_WORKERS - 4}`);
    expect(out.at(-1)!.workerId).toBe(`w0${1000 - 5}`);
  });
});

describe("finished workers' logs", () => {
  it('keeps the most recent ones an earlier agent left, deletes the older, and answers `logs` from them', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'lnx-kept-'));
    await mkdir(workersDir(stateDir), { recursive: true });
    // Oldest first: wrk_1 was written 3 s ago, wrk_3 now.
    for (const [i, id] of ['wrk_1', 'wrk_2', 'wrk_3'].entries()) {
      await writeFile(workerLogPath(stateDir, id), `${id} line 1\n${id} exited with 3\n`);
      const at = new Date(Date.now() - (3 - i) * 1_000);
      await utimes(workerLogPath(stateDir, id), at, at);
    }
    const supervisor = new WorkerSupervisor({
      stateDir,
      policy: AgentPolicy.parse({}),
      users: null,
      holds: new MachineHolds(stateDir, async () => []),
      onChange: () => {},
      log: () => {},
      keptLogs: 2,
      jobEnv: async () => {
        throw new Error('this test runs no job runner');
      },
    });
    await supervisor.recover();
    expect(supervisor.has('wrk_1')).toBe(false);
    expect(supervisor.has('wrk_3')).toBe(true);
    expect(await supervisor.logs('wrk_2', 10)).toEqual(['wrk_2 line 1', 'wrk_2 exited with 3']);
    expect((await readdir(workersDir(stateDir))).sort()).toEqual(['wrk_2.log', 'wrk_3.log']);
    expect(supervisor.reports()).toEqual([]);
  });
});

describe('GPUs held by runtimes and workers alike', () => {
  it('gives a worker the lowest GPU indices no runtime or other worker holds, and frees them on release', async () => {
    const holds = new MachineHolds(await mkdtemp(join(tmpdir(), 'lnx-holds-')), async () => [0, 1, 2, 3]);
    expect(await holds.reserveGpus('asg_1', 2)).toEqual([0, 1]);
    expect(await holds.reserveGpus('worker:w1', 1)).toEqual([2]);
    await expect(holds.reserveGpus('worker:w2', 2)).rejects.toThrow('needs 2 GPUs; 1 of 4 are free');
    holds.adopt('worker:w3', { gpuIndices: [3], uid: null, pid: process.pid });
    expect(await holds.reserveGpus('worker:w2', 0)).toEqual([]);
    holds.release('asg_1');
    expect(await holds.reserveGpus('worker:w2', 2)).toEqual([0, 1]);
  });

  it('sets CUDA_VISIBLE_DEVICES itself: a worker that asked for none sees none', () => {
    expect(workerEnv({ RANK: '1', CUDA_VISIBLE_DEVICES: '0,1,2,3' }, { home: '/h', gpuIndices: [2] })).toEqual({
      RANK: '1',
      CUDA_VISIBLE_DEVICES: '2',
      PATH: '/usr/local/bin:/usr/bin:/bin',
      HOME: '/h',
    });
    expect(workerEnv({}, { home: '/h', gpuIndices: [] }).CUDA_VISIBLE_DEVICES).toBe('');
  });
});

describe('the local policy on a worker command', () => {
  const policy = AgentPolicy.parse({ templates: { trainer: { executable: '/opt/train/bin/train', executableSha256: DIGEST, env: ['HF_HOME'] } } });
  const platform = { RANK: '0', LOCAL_RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500', CUDA_VISIBLE_DEVICES: '0' };

  it('allows the platform variables for a worker whatever the template lists, not for a runtime', () => {
    expect(templateRefusal(policy, command({ ...platform, HF_HOME: '/srv/hf' }), WORKER_PLATFORM_ENV)).toBeNull();
    expect(templateRefusal(policy, command(platform))).toBe('template "trainer" may not set environment variable CUDA_VISIBLE_DEVICES');
  });

  it('checks a worker command as a runtime template: name, executable, digest, env', () => {
    expect(templateRefusal(policy, { ...command(), template: 'other' }, WORKER_PLATFORM_ENV)).toBe('template "other" is not allowed');
    expect(templateRefusal(policy, { ...command(), executable: '/bin/sh' }, WORKER_PLATFORM_ENV)).toBe(
      'template "trainer" must run /opt/train/bin/train, not /bin/sh',
    );
    expect(templateRefusal(policy, { ...command(), executableSha256: 'b'.repeat(64) }, WORKER_PLATFORM_ENV)).toMatch(/pins executable digest/);
    expect(templateRefusal(policy, command({ LD_PRELOAD: '/tmp/x.so' }), WORKER_PLATFORM_ENV)).toBe(
      'template "trainer" may not set environment variable LD_PRELOAD',
    );
  });
});

describe('machineAddress', () => {
  const iface = (address: string, internal: boolean, family: 'IPv4' | 'IPv6' = 'IPv4') =>
    ({ address, internal, family, netmask: '', mac: '', cidr: null }) as NetworkInterfaceInfo;

  it('takes the configured address, else the first non-internal IPv4, else null', () => {
    const interfaces = { lo: [iface('127.0.0.1', true)], eth0: [iface('fe80::1', false, 'IPv6'), iface('10.1.2.3', false)], eth1: [iface('10.9.9.9', false)] };
    expect(machineAddress('node-7.site', interfaces)).toBe('node-7.site');
    expect(machineAddress(undefined, interfaces)).toBe('10.1.2.3');
    expect(machineAddress(undefined, { lo: [iface('127.0.0.1', true)] })).toBeNull();
  });
});
