import { describe, expect, it } from 'vitest';
import type { MachineView } from '../../shared/contracts/machine.js';
import { lineChart, niceCeil } from '../../functions/api/console/charts.js';
import { fleetFragment } from '../../functions/api/console/fleet.js';
import { requestsFragment, tokensPerSecond, type RecentRequest } from '../../functions/api/console/requests.js';
import { runDetailBody, runsFragment } from '../../functions/api/console/runs.js';
import type { RunDetail, RunQueueStanding, RunView } from '../../shared/contracts/run-view.js';
import { JobSpec, type JobView } from '../../shared/batch/job.js';
import { jobsFragment } from '../../functions/api/console/jobs.js';
import { RunSpec } from '../../shared/contracts/run.js';
import type { ConsoleSession } from '../../functions/api/console/session.js';
import { duration, quantile } from '../../functions/api/console/format.js';

const session = (role: ConsoleSession['role']): ConsoleSession => ({
  id: 'ses_1',
  tokenId: 'tok_1',
  workspaceId: 'ws_1',
  role,
  expiresAt: new Date(),
  csrf: 'csrf-token',
});

const HOSTILE = '<img src=x onerror=alert(1)>"\'&';

function machine(overrides: Partial<MachineView> = {}): MachineView {
  return {
    id: 'mch_01ARZ3NDEKTSV4RRFFQ69G5FAV',
    name: 'gpu-1',
    workspaceId: 'ws_1',
    labels: { site: HOSTILE },
    state: 'ready',
    reportedStatus: 'ready',
    streamAttached: true,
    heartbeatAgeMs: 1_234,
    lastHeartbeatAt: new Date().toISOString(),
    desiredGen: 3,
    reportedGen: 3,
    cordoned: false,
    draining: false,
    drained: false,
    shared: false,
    revokedAt: null,
    credentialExpiresAt: null,
    inventory: {
      hostname: 'gpu-1',
      os: 'linux',
      arch: 'arm64',
      cpus: 20,
      cpuModel: null,
      memoryTotalMiB: 122_880,
      memoryAvailableMiB: 100_000,
      diskFreeMiB: null,
      gpus: [
        {
          index: 0,
          uuid: null,
          name: HOSTILE,
          memoryTotalMiB: 122_880,
          memoryUsedMiB: null,
          unifiedMemory: true,
          driverVersion: null,
          utilizationPercent: 37,
          temperatureC: 51,
          powerDrawW: null,
        },
      ],
      agentVersion: '0.1.0',
    },
    resources: {
      capacity: { gpus: 1, memoryMiB: 122_880, cores: 20 },
      replicas: { gpus: 1, memoryMiB: 40_960, cores: 0 },
      workers: { gpus: 0, memoryMiB: 0, cores: 4 },
      free: { gpus: 0, memoryMiB: 81_920, cores: 16 },
    },
    warmModels: ['llama'],
    gpus: [{ index: 0, utilizationPercent: 37, memoryUsedMiB: 20_000, memoryTotalMiB: 122_880, temperatureC: 51, powerDrawW: 40 }],
    runtimes: [
      {
        assignmentId: 'asg_1',
        deploymentId: 'dep_1',
        deploymentName: 'llama',
        model: 'llama',
        desired: true,
        reportedState: 'ready',
        state: 'ready',
        gen: 3,
        restarts: 0,
        message: HOSTILE,
        reportedAgeMs: 100,
        routable: true,
        warm: true,
        activeInvocations: 2,
        queueDepth: 0,
        engine: null,
        progress: null,
      },
    ],
    attention: [{ deploymentId: 'dep_2', deploymentName: 'other', assignmentId: 'asg_2', reason: HOSTILE, failedAt: new Date().toISOString() }],
    createdAt: new Date().toISOString(),
    ...overrides,
  };
}

function run(overrides: Partial<RunView> = {}): RunView {
  return {
    id: 'run_01ARZ3NDEKTSV4RRFFQ69G5FAV',
    name: 'train',
    state: 'pending',
    priority: 5,
    reason: HOSTILE,
    position: 2,
    restarts: 0,
    workerCount: 4,
    workersDone: 1,
    submittedAt: '2026-12-03T13:46:57.041Z',
    startedAt: null,
    finishedAt: null,
    ...overrides,
  };
}

const STANDING: RunQueueStanding = {
  windowMs: 86_400_000,
  weight: 2,
  priorityCeiling: 1000,
  gpuSeconds: 12_345,
  share: 6_173,
  waiting: 1,
  gpusHeld: 4,
  competing: 3,
  rank: 2,
};
const runsData = (items: RunView[], more: boolean) => ({ page: { items, more }, standing: STANDING });

function runDetail(overrides: Partial<RunDetail> = {}): RunDetail {
  return {
    ...run(),
    spec: RunSpec.parse({ template: 'sim-job', workers: 1 }),
    workers: [
      {
        id: 'wrk_1',
        name: 'train-0',
        rank: 0,
        group: null,
        state: 'failed',
        machineId: 'mch_1',
        machineName: HOSTILE,
        attempt: 1,
        restarts: 1,
        phase: 'start',
        exitCode: 3,
        message: HOSTILE,
        resources: { gpus: 1, cores: 0, memoryMiB: 0 },
      },
    ],
    events: [{ workerId: 'wrk_1', from: 'running', to: 'failed', reason: HOSTILE, origin: 'agent', at: '2026-12-03T13:47:00.000Z' }],
    ...overrides,
  };
}

describe('console rendering', () => {
  it('escapes everything a node or an operator wrote', () => {
    const out = fleetFragment([machine()], session('operator')).toString();
    expect(out).not.toContain('<img');
    expect(out).toContain('&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;');
  });

  it('shows what replicas and workers reserve of each machine and what is free', () => {
    const out = fleetFragment([machine()], session('viewer')).toString();
    expect(out).toContain('<th scope="col">Reserved</th>');
    expect(out).toContain('<li>GPUs: 1 replicas · 0 workers · <strong>0 free</strong></li>');
    expect(out).toContain('<li>cores: 0 replicas · 4 workers · <strong>16 free</strong></li>');
  });

  it('shows actions only to operators, each carrying the CSRF token and naming its machine', () => {
    const operator = fleetFragment([machine()], session('operator')).toString();
    expect(operator).toContain('action="/console/machines/mch_01ARZ3NDEKTSV4RRFFQ69G5FAV/drain"');
    expect(operator.match(/name="_csrf" value="csrf-token"/g)).toHaveLength(3); // cordon, drain, clear failures
    expect(operator).toContain('<span class="vh"> gpu-1</span>');
    const viewer = fleetFragment([machine()], session('viewer')).toString();
    expect(viewer).not.toContain('<form');
    const draining = fleetFragment([machine({ cordoned: true, draining: true, attention: [] })], session('admin')).toString();
    expect(draining).toContain('/uncordon');
    expect(draining).not.toContain('/drain"');
  });

  it('draws no chart without data, and says why', () => {
    const empty = lineChart({ id: 'c', title: 'TTFT', points: [], series: 's1', format: String, empty: 'no requests yet' }).toString();
    expect(empty).toContain('data-points="0"');
    expect(empty).toContain('>no requests yet</text>');
    expect(empty).not.toContain('<polyline');
    expect(requestsFragment([]).toString()).toContain('No requests yet');
  });

  it('scales a chart to round gridlines and summarises it for screen readers', () => {
    expect([niceCeil(0), niceCeil(0.3), niceCeil(11.5), niceCeil(62.5), niceCeil(1000)]).toEqual([1, 0.5, 20, 100, 1000]);
    const chart = lineChart({
      id: 'c',
      title: 'TTFT',
      points: [
        { t: 0, v: 46 },
        { t: 2000, v: 26 },
        { t: 4000, v: 30 },
      ],
      series: 's1',
      format: (v) => `${v} ms`,
      empty: '',
    }).toString();
    expect(chart).toContain('role="img"');
    expect(chart).toContain('3 requests: median 30 ms, 95th percentile 46 ms, max 46 ms');
    expect([...chart.matchAll(/text-anchor="end">(\d+ ms)</g)].map((m) => m[1])).toEqual(['0 ms', '20 ms', '40 ms', '60 ms']);
    expect(chart).not.toMatch(/style=/);
  });

  it('counts tokens per second after the first byte, or over the whole request when it came in one piece', () => {
    const at = new Date('2025-01-01T00:00:00Z');
    const base: Pick<RecentRequest, 'createdAt' | 'finishedAt' | 'firstByteMs' | 'completionTokens'> = {
      createdAt: at,
      finishedAt: new Date(at.getTime() + 1_100),
      firstByteMs: 100,
      completionTokens: 200,
    };
    expect(tokensPerSecond(base)).toBe(200);
    expect(tokensPerSecond({ ...base, firstByteMs: 1_099 })).toBeCloseTo(200 / 1.1);
    expect(tokensPerSecond({ ...base, completionTokens: null })).toBeNull();
    expect(tokensPerSecond({ ...base, finishedAt: null })).toBeNull();
  });

  it('formats durations and quantiles', () => {
    expect([duration(400), duration(12_300), duration(180_000), duration(9_000_000), duration(null)]).toEqual(['0.4 s', '12 s', '3 min', '2.5 h', '–']);
    expect(quantile([5, 1, 3, 2, 4], 0.5)).toBe(3);
    expect(quantile([], 0.5)).toBeNull();
  });

  it('escapes the reasons and messages of runs, workers and events', () => {
    const list = runsFragment(runsData([run()], false)).toString();
    const detail = runDetailBody(runDetail(), session('operator')).toString();
    for (const out of [list, detail]) {
      expect(out).not.toContain('<img');
      expect(out).toContain('&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;');
    }
    expect(list).toContain('queue position 2');
    expect(list).toContain('fair share: <strong>12,345</strong> GPU-seconds in 24 h at weight 2; <strong>2</strong> of 3 workspaces waiting');
    expect(list).toContain('1 of 4 done');
    expect(detail).toContain('<td data-label="Exit code" class="num">3</td>');
  });

  it('says so when there is no run, no event, or no older page', () => {
    const empty = runsFragment(runsData([], false)).toString();
    expect(empty).toContain('No run yet');
    expect(empty).not.toContain('<table');
    expect(runsFragment(runsData([run()], false)).toString()).not.toContain('Older runs');
    expect(runsFragment(runsData([run()], true)).toString()).toContain('href="/console/runs?after=run_01ARZ3NDEKTSV4RRFFQ69G5FAV"');
    const quiet = runDetailBody(runDetail({ events: [], workers: [] }), session('viewer')).toString();
    expect(quiet).toContain('No event yet.');
  });

  it('offers Cancel to operators of a live run only, carrying the CSRF token', () => {
    const operator = runDetailBody(runDetail(), session('operator')).toString();
    expect(operator).toContain('action="/console/runs/run_01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel"');
    expect(operator).toContain('name="_csrf" value="csrf-token"');
    expect(runDetailBody(runDetail(), session('viewer')).toString()).not.toContain('<form');
    expect(runDetailBody(runDetail({ state: 'failed', position: null }), session('admin')).toString()).not.toContain('<form');
  });
});

describe('the jobs page', () => {
  const job = (overrides: Partial<JobView> = {}): JobView => ({
    id: 'job_01ARZ3NDEKTSV4RRFFQ69G5FAV',
    kind: 'rows',
    state: 'running',
    spec: JobSpec.parse({ kind: 'rows', rows: { kind: 'chat', model: 'sim-chat' }, inputFileId: 'file_1', format: 'parquet' }),
    attempt: 0,
    rows: { total: 1000, succeeded: 400, failed: 12 },
    rate: 25.5,
    etaMs: 23_000,
    outputFileId: null,
    errorFileId: null,
    reason: HOSTILE,
    createdAt: '2026-12-03T10:00:00.000Z',
    startedAt: '2026-12-03T10:00:01.000Z',
    finishedAt: null,
    expiresAt: null,
    ...overrides,
  });

  it('shows what each job does, its progress with rate and time left while it runs, and escapes its reason', () => {
    const out = jobsFragment({ items: [job()], more: true }).toString();
    expect(out).toContain('chat on <span class="mono">sim-chat</span> (parquet)');
    expect(out).toContain('412 of 1,000 rows');
    expect(out).toContain('12 failed');
    expect(out).toContain('25.5 rows/s, 23 s left');
    expect(out).not.toContain('<img');
    expect(out).toContain('href="/console/jobs?after=job_01ARZ3NDEKTSV4RRFFQ69G5FAV"');
  });

  it('drops the rate of a job that ended and says so when there is none', () => {
    const ended = jobsFragment({ items: [job({ state: 'completed', rate: 3, etaMs: 0, reason: null, outputFileId: 'file_out' })], more: false }).toString();
    expect(ended).not.toContain('rows/s');
    expect(ended).toContain('file_out');
    expect(ended).not.toContain('Older jobs');
    expect(jobsFragment({ items: [], more: false }).toString()).toContain('No job yet');
  });
});
