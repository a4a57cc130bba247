import type { PlacedWorker } from './queue.js';

/** PyTorch's default rendezvous port, used when the caller picks none. */
export const DEFAULT_MASTER_PORT = 29500;

/** A worker's name: `<run>-<rank>`, or `<run>-<group>-<rank>` in a run with groups; the rank is the run's. */
export function workerName(run: string, group: string | null, rank: number): string {
  return group === null ? `${run}-${rank}` : `${run}-${group}-${rank}`;
}

/** A worker as the admission pass placed it, with the indices of the GPUs its agent reserved for it there. */
export interface WorkerPlacement extends PlacedWorker {
  gpuIndices: readonly number[];
}

export interface WorkerEnvironment {
  name: string;
  machineId: string;
  env: Record<string, string>;
}

/**
 * Every worker's name and environment, in rank order: RANK (its rank in the run, groups in the spec's order),
 * LOCAL_RANK (its index among the run's workers on its machine, by rank), WORLD_SIZE (the run's workers),
 * MASTER_ADDR (the address of rank 0's machine), MASTER_PORT, and CUDA_VISIBLE_DEVICES (its GPUs; empty for a
 * worker without GPUs, which then sees none). Throws when the ranks are not 0..n-1 or rank 0's machine has no
 * address: the caller placed the run, so either is its bug.
 */
export function workerEnvironments(input: {
  run: string;
  workers: readonly WorkerPlacement[];
  addressOf: ReadonlyMap<string, string>;
  masterPort?: number;
}): WorkerEnvironment[] {
  const workers = [...input.workers].sort((a, b) => a.rank - b.rank);
  workers.forEach((worker, i) => {
    if (worker.rank !== i) throw new Error(`run ${input.run}: ranks must be 0 to ${workers.length - 1}, found ${worker.rank} at ${i}`);
  });
  const master = workers[0];
  const masterAddress = master && input.addressOf.get(master.machineId);
  if (master && masterAddress === undefined) throw new Error(`run ${input.run}: rank 0's machine ${master.machineId} has no address`);
  const onMachine = new Map<string, number>();
  return workers.map((worker) => {
    const localRank = onMachine.get(worker.machineId) ?? 0;
    onMachine.set(worker.machineId, localRank + 1);
    return {
      name: workerName(input.run, worker.group, worker.rank),
      machineId: worker.machineId,
      env: {
        RANK: String(worker.rank),
        LOCAL_RANK: String(localRank),
        WORLD_SIZE: String(workers.length),
        MASTER_ADDR: masterAddress!,
        MASTER_PORT: String(input.masterPort ?? DEFAULT_MASTER_PORT),
        CUDA_VISIBLE_DEVICES: worker.gpuIndices.join(','),
      },
    };
  });
}

/**
 * LOCAL_RANK of a worker placed again on `machineId` alone (restarted elsewhere, its run's other workers where
 * they were): the number of its run's workers of lower rank on that machine, as `workerEnvironments` counts it.
 */
export function localRankOn(machineId: string, rank: number, workers: ReadonlyArray<{ rank: number; machineId: string | null }>): number {
  return workers.filter((w) => w.machineId === machineId && w.rank < rank).length;
}
