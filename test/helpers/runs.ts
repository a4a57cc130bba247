import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { z } from 'zod';
import { RunDetail, type RunSubmission } from '../../shared/contracts/run-view.js';
import { MachineView } from '../../shared/contracts/machine.js';
import { WorkerRecord, workersDir } from '../../agent/workers/records.js';
import { waitFor, type TestPlane } from './plane.js';
import { simJobs } from './sim-jobs.js';
import { stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';

/** What a sim job does (the `sim-job` template of `ensureJobTemplates`): sleep, then exit with a code. */
export const simJob = (sleepMs: number, exitCode = 0) => ({ template: 'sim-job', params: { sleep_ms: sleepMs, exit_code: exitCode } });

/** Runs over the management API of the plane `planeOf()` gives when called, as an operator submits and follows them. */
export function runsApi(planeOf: () => Pick<TestPlane, 'api'>) {
  const submit = async (submission: z.input<typeof RunSubmission>) => {
    const { data, error } = await planeOf().api.POST('/runs', { body: submission });
    if (!data) throw new Error(`submit ${submission.name}: ${JSON.stringify(error)}`);
    return RunDetail.parse(data);
  };
  const show = async (id: string) => RunDetail.parse((await planeOf().api.GET('/runs/{id}', { params: { path: { id } } })).data);
  const until = (id: string, done: (r: RunDetail) => boolean, what: string, timeoutMs = 60_000) =>
    waitFor(
      async () => {
        const run = await show(id);
        return done(run) ? run : null;
      },
      { timeoutMs, intervalMs: 200, what },
    );
  const cancel = async (id: string) => {
    const { response } = await planeOf().api.POST('/runs/{id}/cancel', { params: { path: { id } } });
    if (!response.ok) throw new Error(`cancel ${id}: HTTP ${response.status}`);
  };
  return { submit, show, until, cancel };
}

/** Waits until `names` are ready machines with their streams attached, and gives them in that order. */
export async function readyMachines(plane: Pick<TestPlane, 'api'>, names: string[], timeoutMs = 90_000): Promise<MachineView[]> {
  return await waitFor(
    async () => {
      const { data } = await plane.api.GET('/machines');
      const ready = MachineView.array()
        .parse(data?.data)
        .filter((m) => m.state === 'ready' && m.streamAttached);
      const found = names.map((name) => ready.find((m) => m.name === name));
      return found.every((m) => m !== undefined) ? (found as MachineView[]) : null;
    },
    { timeoutMs, what: `ready machines ${names.join(', ')} with their streams` },
  );
}

/**
 * The live sim jobs that were not running at `before` (`simJobs()` taken when the suite began); with `under`, only
 * those of the agents whose state dirs are under it (a worker's home is in its agent's state dir when the agent
 * runs as root), so that suites running at the same time do not see each other's.
 */
export async function newSimJobs(before: number[], under?: string): Promise<number[]> {
  const fresh = (await simJobs()).filter((pid) => !before.includes(pid));
  if (under === undefined || process.getuid?.() !== 0) return fresh;
  const ours: number[] = [];
  for (const pid of fresh) {
    const env = (await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '')).split('\0');
    if (env.some((e) => e.startsWith(`HOME=${under}/`))) ours.push(pid);
  }
  return ours;
}

/**
 * The process the agent of `stateDir` runs for `workerId`, as the kernel sees it (read as root): its pid, uid and
 * environment; null while it has none (no record yet, or its process ended).
 */
export async function workerProcess(stateDir: string, workerId: string): Promise<{ pid: number; uid: number; env: string[] } | null> {
  const json = await readFile(join(workersDir(stateDir), `${encodeURIComponent(workerId)}.json`), 'utf8').catch(() => null);
  if (json === null) return null;
  const { pid } = WorkerRecord.parse(JSON.parse(json));
  if (!(await simJobs()).includes(pid)) return null;
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const env = (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
  return { pid, uid: Number(/^Uid:\s+(\d+)/m.exec(status)![1]), env };
}

/**
 * Ends a runs suite's fleet: its nodes, the sim jobs their agents left behind under `dir` (a failing test's are ours
 * to end), its plane and its folder. Each part may be missing, after a `beforeAll` that failed midway.
 */
export async function stopRunFleet(fleet: { nodes: SimNode[]; before?: number[]; dir?: string; plane?: Pick<TestPlane, 'stop'> }): Promise<void> {
  await stopSimNodes(fleet.nodes);
  if (fleet.dir) for (const pid of await newSimJobs(fleet.before ?? [], fleet.dir)) process.kill(-pid, 'SIGKILL');
  await fleet.plane?.stop();
  if (fleet.dir) await rm(fleet.dir, { recursive: true, force: true });
}
