import type { WorkspaceQuota } from '../../../shared/contracts/placement.js';

/** What a workspace's live assignments reserve, summed: what its quota bounds. */
export interface QuotaUsage {
  gpus: number;
  memoryMiB: number;
  replicas: number;
}

export const NO_USAGE: QuotaUsage = { gpus: 0, memoryMiB: 0, replicas: 0 };

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/**
 * Why one more replica reserving `need` would take the workspace past its quota (`workspace quota: needs 1 GPU, 0
 * of 4 left`), or null when it fits. Checked GPUs, then memory, then the replica count. Pure.
 */
export function quotaRefusal(quota: WorkspaceQuota, usage: QuotaUsage, need: { gpus: number; memoryMiB: number }): string | null {
  if (quota.gpus !== undefined && need.gpus > 0 && usage.gpus + need.gpus > quota.gpus) {
    return `workspace quota: needs ${plural(need.gpus, 'GPU', 'GPUs')}, ${Math.max(0, quota.gpus - usage.gpus)} of ${quota.gpus} left`;
  }
  if (quota.memoryMiB !== undefined && need.memoryMiB > 0 && usage.memoryMiB + need.memoryMiB > quota.memoryMiB) {
    return `workspace quota: needs ${need.memoryMiB} MiB, ${Math.max(0, quota.memoryMiB - usage.memoryMiB)} of ${quota.memoryMiB} MiB left`;
  }
  if (quota.replicas !== undefined && usage.replicas + 1 > quota.replicas) {
    return `workspace quota: needs 1 replica, ${Math.max(0, quota.replicas - usage.replicas)} of ${quota.replicas} left`;
  }
  return null;
}
