import type { WorkspaceQuota } from '../../../shared/contracts/placement.js';

/** What a workspace's live assignments (replicas and run workers) reserve, summed: what its quota bounds. */
export interface QuotaUsage {
  gpus: number;
  memoryMiB: number;
  replicas: number;
}

export const NO_USAGE: QuotaUsage = { gpus: 0, memoryMiB: 0, replicas: 0 };

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/**
 * Why a reservation of `need` would take the workspace past its quota (`workspace quota: needs 1 GPU, 0 of 4 left`),
 * or null when it fits. Checked GPUs, then memory, then the replica count. `need.replicas` is how many replicas it
 * adds: one when absent (a replica); a run's workers add none, as the quota's `replicas` counts replicas only. Pure.
 */
export function quotaRefusal(quota: WorkspaceQuota, usage: QuotaUsage, need: { gpus: number; memoryMiB: number; replicas?: number }): string | null {
  if (quota.gpus !== undefined && need.gpus > 0 && usage.gpus + need.gpus > quota.gpus) {
    return `workspace quota: needs ${plural(need.gpus, 'GPU', 'GPUs')}, ${Math.max(0, quota.gpus - usage.gpus)} of ${quota.gpus} left`;
  }
  if (quota.memoryMiB !== undefined && need.memoryMiB > 0 && usage.memoryMiB + need.memoryMiB > quota.memoryMiB) {
    return `workspace quota: needs ${need.memoryMiB} MiB, ${Math.max(0, quota.memoryMiB - usage.memoryMiB)} of ${quota.memoryMiB} MiB left`;
  }
  const replicas = need.replicas ?? 1;
  if (quota.replicas !== undefined && replicas > 0 && usage.replicas + replicas > quota.replicas) {
    return `workspace quota: needs ${plural(replicas, 'replica', 'replicas')}, ${Math.max(0, quota.replicas - usage.replicas)} of ${quota.replicas} left`;
  }
  return null;
}
