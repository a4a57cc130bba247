import { heldRefusal, resourceRefusal, selectorRefusal, type PlacementConstraint, type ResourceNeed } from '../scheduler/place.js';
import { workersFitting, type Host } from './hosts.js';

/** A group of identical workers to place, and where they may go. */
export interface ShapeRequest {
  workers: number;
  need: Required<ResourceNeed>;
  selector: Record<string, string>;
  constraints?: readonly PlacementConstraint[];
}

/**
 * Where a group's workers go: `workersPerMachine` on each machine of `machineIds`, in rank order (the first machine
 * takes ranks 0 to workersPerMachine - 1 of the group, and so on).
 */
interface Shape {
  workersPerMachine: number;
  machineIds: string[];
}

export type ShapeResult = { shape: Shape } | { reason: string };

/**
 * Against what a shape is judged: `now`, what each machine has free now; `emptied`, what it would have with nothing
 * on it (an aged run choosing the machines to hold, docs/runs.md), its machines then preferred by how much of the
 * run they could take now.
 */
export type ShapeMode = 'now' | 'emptied';

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

function needText(need: Required<ResourceNeed>): string {
  const parts = [];
  if (need.gpus > 0) parts.push(plural(need.gpus, 'GPU', 'GPUs'));
  if (need.gpuMemoryMiB > 0) parts.push(`GPUs of ${need.gpuMemoryMiB} MiB`);
  if (need.cores > 0) parts.push(plural(need.cores, 'core', 'cores'));
  if (need.memoryMiB > 0) parts.push(`${need.memoryMiB} MiB`);
  return parts.length > 0 ? `${parts.join(', ')} each` : 'reserving nothing';
}

/** The reasons machines were ruled out for, most frequent first (ties by text), three at most. */
function ruledOutText(ruledOut: Map<string, number>, outOf: number): string {
  if (ruledOut.size === 0) return '';
  let total = 0;
  for (const n of ruledOut.values()) total += n;
  const top = [...ruledOut].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const shown = top.slice(0, 3).map(([reason, n]) => `${n} ${reason}`);
  if (top.length > 3) shown.push(`${top.length - 3} other reasons`);
  return `; ruled out ${total} of ${outOf} machines: ${shown.join(', ')}`;
}

/**
 * Why the fleet cannot take the group (as few machines as possible first): each uniform shape that some machine
 * could hold a share of, with how many machines could, and the machines ruled out whatever the shape.
 */
function refusal(request: ShapeRequest, atLeast: Int32Array, maxFit: number, mode: ShapeMode, ruledOut: Map<string, number>, hosts: number): string {
  const workers = request.workers;
  const verb = mode === 'emptied' ? 'would not fit even on emptied machines' : workers === 1 ? 'does not fit now' : 'do not fit now';
  const head = `${plural(workers, 'worker', 'workers')} of ${needText(request.need)} ${verb}`;
  const shapes: string[] = [];
  for (let per = Math.min(workers, maxFit); per >= 1 && shapes.length < 4; per--) {
    if (workers % per !== 0) continue;
    shapes.push(`${plural(workers / per, 'machine', 'machines')} x ${per} (${atLeast[per]} can)`);
  }
  const tried = shapes.length > 0 ? `: as ${shapes.join(', ')}` : ': no machine has room for one';
  return `${head}${tried}${ruledOutText(ruledOut, hosts)}`;
}

/**
 * A group's shape: `workersPerMachine` workers on each of `workers / workersPerMachine` machines, the same number on
 * every machine (as `torchrun --nproc_per_node` and collective libraries expect), the fewest machines first. Among
 * the machines that can take that many, the tightest fit first (fewest further workers of this size would fit: big
 * holes are left for big runs), then machine id; in `emptied` mode, the machines with most of it free now first.
 * Machines down, cordoned, draining, held for an aged run, without the selector's and policy's labels or with GPUs
 * too small are ruled out. Deterministic: the same hosts and request always give the same shape. Pure: it reserves
 * nothing (`reserveOn`). O(machines + workers), plus a sort of the candidates when it fits.
 */
export function pickShape(hosts: readonly Host[], request: ShapeRequest, mode: ShapeMode = 'now'): ShapeResult {
  const { workers, need } = request;
  // How many workers each machine could take (-1: ruled out); capped at the group's size, which is all a shape asks.
  const fit = new Int32Array(hosts.length).fill(-1);
  const histogram = new Int32Array(workers + 1);
  const ruledOut = new Map<string, number>();
  const gpuFilter = need.gpuMemoryMiB > 0 ? { gpus: 0, memoryMiB: 0, gpuMemoryMiB: need.gpuMemoryMiB } : null;
  let maxFit = 0;
  for (let i = 0; i < hosts.length; i++) {
    const host = hosts[i]!;
    const reason =
      host.unavailable ??
      (host.heldFor !== null ? heldRefusal(host.heldFor) : null) ??
      selectorRefusal(host.labels, request.selector, request.constraints) ??
      (gpuFilter && resourceRefusal(host.capacity, gpuFilter));
    if (reason) {
      ruledOut.set(reason, (ruledOut.get(reason) ?? 0) + 1);
      continue;
    }
    const n = workersFitting(mode === 'now' ? host.free : host.capacity, need, workers);
    fit[i] = n;
    histogram[n]! += 1;
    if (n > maxFit) maxFit = n;
  }
  // atLeast[p]: how many machines could take p workers.
  const atLeast = new Int32Array(workers + 2);
  for (let p = workers; p >= 0; p--) atLeast[p] = atLeast[p + 1]! + histogram[p]!;
  for (let per = Math.min(workers, maxFit); per >= 1; per--) {
    if (workers % per !== 0) continue;
    const machines = workers / per;
    if (atLeast[per]! < machines) continue;
    const candidates: number[] = [];
    for (let i = 0; i < hosts.length; i++) if (fit[i]! >= per) candidates.push(i);
    // Candidates are in id order and the sort is stable: ties stay in id order. The tightest fit counts what the
    // machine could take beyond this group, so uncapped.
    const rank = new Map(
      candidates.map((i) => [i, mode === 'now' ? workersFitting(hosts[i]!.free, need, Number.MAX_SAFE_INTEGER) : -workersFitting(hosts[i]!.free, need, per)]),
    );
    candidates.sort((a, b) => rank.get(a)! - rank.get(b)!);
    return { shape: { workersPerMachine: per, machineIds: candidates.slice(0, machines).map((i) => hosts[i]!.id) } };
  }
  return { reason: refusal(request, atLeast, maxFit, mode, ruledOut, hosts.length) };
}
