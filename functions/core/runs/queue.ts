import type { WorkspaceQuota } from '../../../shared/contracts/placement.js';
import type { PlacementConstraint } from '../scheduler/place.js';
import { quotaRefusal, type QuotaUsage } from '../scheduler/quota.js';
import { demandTotal, type GroupDemand } from './demand.js';
import { fairShare } from './fair-share.js';
import { hostsOf, reserveOn, type Host, type QueueMachine } from './hosts.js';
import { pickShape } from './shape.js';

/** How long a run waits before it is aged (docs/runs.md, "How the queue decides"), unless the caller says otherwise. */
export const DEFAULT_AGING_MS = 2 * 3_600_000;
/**
 * How many aged runs hold machines at once, the first in the queue's order, unless the caller says otherwise: each
 * hold stops backfilling on its machines, so holds are few; the next aged run holds once one of them has started.
 */
export const DEFAULT_HOLDING_RUNS = 4;

/** A run waiting in the queue, as the admission pass needs it. Times in ms since the epoch. */
export interface QueuedRun {
  id: string;
  workspaceId: string;
  /** As submitted; the pass caps it at the workspace's ceiling. */
  priority: number;
  /** Breaks ties between runs of equal priority and fair share: earlier first. */
  submittedAt: number;
  /**
   * Since when it has waited, for aging: its submission, or its return to the queue after a restart. A gang released
   * for not assembling keeps its own, so that it still ages.
   */
  waitingSince: number;
  /** A run restarting after a failure waits out its back-off: nothing is placed for it before then. */
  notBefore: number | null;
  groups: readonly GroupDemand[];
  selector: Record<string, string>;
  constraints?: readonly PlacementConstraint[];
}

export interface QueueWorkspace {
  id: string;
  /** Its fair-share weight (> 0). */
  weight: number;
  /** The highest priority its runs may use. */
  priorityCeiling: number;
  quota: WorkspaceQuota;
  /** What its replicas and workers reserve now. */
  usage: QuotaUsage;
  /** GPU-seconds it held in the fair-share window (`gpuSecondsInWindow`). */
  gpuSeconds: number;
}

export interface QueueInput {
  now: number;
  runs: readonly QueuedRun[];
  workspaces: readonly QueueWorkspace[];
  /**
   * Every machine, reservations as the store holds them: replicas' and workers'. A run may use its own workspace's
   * machines and the shared ones.
   */
  machines: readonly QueueMachine[];
  agingMs?: number;
  holdingRuns?: number;
}

/** One worker of an admitted run: its rank in the run (groups in the spec's order) and its machine. */
export interface PlacedWorker {
  group: string | null;
  rank: number;
  machineId: string;
}

export type RunDecision =
  | { runId: string; admitted: true; workers: PlacedWorker[] }
  /** `holds`: the machines held for it, when it is aged (empty otherwise). */
  | { runId: string; admitted: false; reason: string; holds: string[] };

interface WaitingRun {
  runId: string;
  reason: string;
  /** 1 for the first run of the queue still waiting after the pass. */
  position: number;
  holds: string[];
}

export interface AdmissionResult {
  admitted: Array<{ runId: string; workers: PlacedWorker[] }>;
  waiting: WaitingRun[];
}

/** Where a run stands in the order: what the comparison reads, computed once per pass. */
interface Key {
  run: QueuedRun;
  priority: number;
  share: number;
}

function compareKeys(a: Key, b: Key): number {
  if (a.priority !== b.priority) return b.priority - a.priority;
  if (a.share !== b.share) return a.share < b.share ? -1 : 1;
  if (a.run.submittedAt !== b.run.submittedAt) return a.run.submittedAt - b.run.submittedAt;
  return a.run.id < b.run.id ? -1 : a.run.id > b.run.id ? 1 : 0;
}

/**
 * The queue's order: higher priority first (each run's capped at its workspace's ceiling), then the lower fair share
 * (GPU-seconds in the window / weight), the earlier submission, the lower id. Total: the same runs and workspaces
 * always give the same order. A run whose workspace is unknown goes last. Aging does not reorder: it holds machines
 * (`openPass`).
 */
export function orderQueue(input: Pick<QueueInput, 'runs' | 'workspaces'>): QueuedRun[] {
  const workspaces = new Map(input.workspaces.map((w) => [w.id, w]));
  const keys: Key[] = input.runs.map((run) => {
    const workspace = workspaces.get(run.workspaceId);
    return {
      run,
      priority: workspace ? Math.min(run.priority, workspace.priorityCeiling) : Number.NEGATIVE_INFINITY,
      share: workspace ? fairShare(workspace.gpuSeconds, workspace.weight) : Number.POSITIVE_INFINITY,
    };
  });
  return keys.sort(compareKeys).map((key) => key.run);
}

/**
 * What the fleet side of a run's decision depends on: runs with the same key fit, or do not, alike. `reach` names
 * the machines the run may use (`reachOf`).
 */
function demandKey(run: QueuedRun, reach: string): string {
  const selector = Object.keys(run.selector)
    .sort()
    .map((k) => `${k}=${run.selector[k]}`)
    .join(',');
  const constraints = (run.constraints ?? []).map((c) => `${c.rule}:${JSON.stringify(c.labels)}`).join(';');
  const groups = run.groups.map((g) => `${g.name}:${g.workers}x${g.need.gpus}/${g.need.gpuMemoryMiB}/${g.need.cores}/${g.need.memoryMiB}`).join(';');
  return `${reach}|${selector}|${constraints}|${groups}`;
}

const minutes = (ms: number) => `${Math.floor(ms / 60_000)} min`;

function listed(ids: readonly string[]): string {
  return ids.length <= 4 ? ids.join(', ') : `${ids.slice(0, 4).join(', ')} and ${ids.length - 4} more`;
}

/**
 * One admission pass, decided run by run in the queue's order (`decide`), each decision seeing what those before it
 * reserved or held. Pure: it copies what it is given and reserves in its copy only.
 *
 * A run fits when its workspace's quota takes all its workers (GPUs and memory, with what the workspace reserves
 * now and what this pass admitted) and the fleet takes every group (`pickShape`); then all its workers are
 * reserved at once. One that does not waits with why, and the walk goes on: a smaller run behind it may still fit
 * (no head-of-line blocking). An aged run that does not fit holds the machines it would take once emptied: runs
 * after it no longer backfill them, so it starts once what runs there ends (docs/runs.md). Runs before it in the
 * order still come first: they are ahead by priority or fair share, and its own workspace's share only falls while
 * it waits. Holds are disjoint, given in the queue's order to `holdingRuns` aged runs at most, and made again by
 * every pass.
 *
 * Capacity only shrinks during a pass, so a demand the fleet refused stays refused: a later run of the same demand
 * key is refused from memory, with the reason (and figures) of the first refusal, in O(1).
 */
export function openPass(input: QueueInput): { decide(run: QueuedRun): RunDecision } {
  const agingMs = input.agingMs ?? DEFAULT_AGING_MS;
  const holdingRuns = input.holdingRuns ?? DEFAULT_HOLDING_RUNS;
  let holding = 0;
  const workspaces = new Map(input.workspaces.map((w) => [w.id, w]));
  const usage = new Map(input.workspaces.map((w) => [w.id, { ...w.usage }]));
  const allHosts = hostsOf(input.machines);
  const hostById = new Map(allHosts.map((h) => [h.id, h]));
  const refusedDemands = new Map<string, string>();
  // A workspace that owns no unshared machine reaches exactly the shared ones, as every such workspace does: its
  // runs share one reach, and refusals are remembered across those workspaces.
  const ownsPrivate = new Set(allHosts.filter((h) => !h.shared).map((h) => h.workspaceId));
  const reachOf = (workspaceId: string) => (ownsPrivate.has(workspaceId) ? workspaceId : '');
  const reachable = new Map<string, Host[]>();
  /** The machines a run of the workspace may use: its own and the shared ones, in id order. */
  function hostsFor(workspaceId: string): Host[] {
    const reach = reachOf(workspaceId);
    let hosts = reachable.get(reach);
    if (!hosts) {
      hosts = allHosts.filter((h) => h.shared || h.workspaceId === workspaceId);
      reachable.set(reach, hosts);
    }
    return hosts;
  }

  /** Every group placed, reservations taken; or why not, with nothing taken. */
  function place(run: QueuedRun): PlacedWorker[] | string {
    const hosts = hostsFor(run.workspaceId);
    const workers: PlacedWorker[] = [];
    const taken: Array<{ host: Host; group: GroupDemand; count: number }> = [];
    for (const group of run.groups) {
      const result = pickShape(hosts, { workers: group.workers, need: group.need, selector: run.selector, constraints: run.constraints });
      if ('reason' in result) {
        for (const t of taken) reserveOn(t.host, t.group.need, -t.count);
        return group.name === null ? result.reason : `group ${group.name}: ${result.reason}`;
      }
      for (const machineId of result.shape.machineIds) {
        const host = hostById.get(machineId)!;
        reserveOn(host, group.need, result.shape.workersPerMachine);
        taken.push({ host, group, count: result.shape.workersPerMachine });
        for (let i = 0; i < result.shape.workersPerMachine; i++) workers.push({ group: group.name, rank: workers.length, machineId });
      }
    }
    return workers;
  }

  /** The machines an aged run holds, one group after another (a held machine serves one group); or why none. */
  function hold(run: QueuedRun): { holds: string[] } | { reason: string } {
    const hosts = hostsFor(run.workspaceId);
    const held: Host[] = [];
    for (const group of run.groups) {
      const result = pickShape(hosts, { workers: group.workers, need: group.need, selector: run.selector, constraints: run.constraints }, 'emptied');
      if ('reason' in result) {
        for (const host of held) host.heldFor = null;
        return { reason: group.name === null ? result.reason : `group ${group.name}: ${result.reason}` };
      }
      for (const machineId of result.shape.machineIds) {
        const host = hostById.get(machineId)!;
        host.heldFor = run.id;
        held.push(host);
      }
    }
    return { holds: held.map((h) => h.id) };
  }

  const wait = (run: QueuedRun, reason: string, holds: string[] = []): RunDecision => ({ runId: run.id, admitted: false, reason, holds });

  return {
    decide(run) {
      if (run.notBefore !== null && run.notBefore > input.now) return wait(run, `restarting: back-off until ${new Date(run.notBefore).toISOString()}`);
      const workspace = workspaces.get(run.workspaceId);
      const used = usage.get(run.workspaceId);
      if (!workspace || !used) return wait(run, `workspace ${run.workspaceId} not found`);
      const total = demandTotal(run.groups);
      const overQuota = quotaRefusal(workspace.quota, used, { gpus: total.gpus, memoryMiB: total.memoryMiB, replicas: 0 });
      if (overQuota) return wait(run, overQuota);
      const key = demandKey(run, reachOf(run.workspaceId));
      let reason = refusedDemands.get(key);
      if (reason === undefined) {
        const placed = place(run);
        if (typeof placed !== 'string') {
          used.gpus += total.gpus;
          used.memoryMiB += total.memoryMiB;
          return { runId: run.id, admitted: true, workers: placed };
        }
        reason = placed;
        refusedDemands.set(key, reason);
      }
      const waited = input.now - run.waitingSince;
      if (waited < agingMs) return wait(run, reason);
      if (holding >= holdingRuns)
        return wait(run, `${reason}; aged (waiting ${minutes(waited)}): holds machines once one of the ${holdingRuns} aged runs ahead of it starts`);
      const held = hold(run);
      if ('reason' in held) return wait(run, `${reason}; aged (waiting ${minutes(waited)}), but ${held.reason}`);
      holding += 1;
      return wait(
        run,
        `${reason}; aged (waiting ${minutes(waited)}): holding ${held.holds.length === 1 ? 'machine' : 'machines'} ${listed(held.holds)}, which smaller runs no longer backfill`,
        held.holds,
      );
    },
  };
}

/**
 * The queue's admission pass: orders the waiting runs (`orderQueue`), decides each in turn (`openPass`), and gives
 * what it admitted, with each worker's machine, and every run still waiting with its reason and its position.
 * Deterministic: the same input always gives the same decisions.
 */
export function admissionPass(input: QueueInput): AdmissionResult {
  const pass = openPass(input);
  const result: AdmissionResult = { admitted: [], waiting: [] };
  for (const run of orderQueue(input)) {
    const decision = pass.decide(run);
    if (decision.admitted) result.admitted.push({ runId: decision.runId, workers: decision.workers });
    else result.waiting.push({ runId: decision.runId, reason: decision.reason, position: result.waiting.length + 1, holds: decision.holds });
  }
  return result;
}
