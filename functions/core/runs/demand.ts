import type { RunSpec } from '../../../shared/contracts/run.js';
import type { ResourceNeed } from '../scheduler/place.js';

/** One group of a run's workers as placement sees it: how many, and what each reserves. */
export interface GroupDemand {
  /** Null for a run without groups. */
  name: string | null;
  workers: number;
  need: Required<ResourceNeed>;
}

/**
 * The workers a valid spec asks for, group by group in the spec's order (which is the order of their ranks). A GPU
 * count becomes `gpus / resources.gpus` workers; the contract has checked it divides.
 */
export function runDemand(spec: RunSpec): GroupDemand[] {
  const groups = spec.groups ?? [{ name: null, workers: spec.workers, gpus: spec.gpus, resources: spec.resources }];
  return groups.map((group) => {
    const resources = group.resources ?? spec.resources;
    return {
      name: group.name,
      workers: group.workers ?? (group.gpus ?? 0) / resources.gpus,
      need: { gpus: resources.gpus, cores: resources.cores, memoryMiB: resources.memoryMiB, gpuMemoryMiB: resources.gpuMemoryMiB },
    };
  });
}

/** What a run reserves in all: what its workspace's quota is checked against. */
export function demandTotal(groups: readonly GroupDemand[]): { gpus: number; memoryMiB: number; cores: number; workers: number } {
  const total = { gpus: 0, memoryMiB: 0, cores: 0, workers: 0 };
  for (const group of groups) {
    total.gpus += group.workers * group.need.gpus;
    total.memoryMiB += group.workers * group.need.memoryMiB;
    total.cores += group.workers * group.need.cores;
    total.workers += group.workers;
  }
  return total;
}
