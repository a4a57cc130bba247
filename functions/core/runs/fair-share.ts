/** The window fair share looks back over, unless the caller passes another: a day. */
export const DEFAULT_FAIR_SHARE_WINDOW_MS = 86_400_000;

/**
 * GPUs a workspace held from `from` until `to` (null: still holds them): a worker's reservation, from its placement
 * to its release, or a replica's. Times in ms since the epoch.
 */
export interface GpuHold {
  workspaceId: string;
  gpus: number;
  from: number;
  to: number | null;
}

/**
 * GPU-seconds each workspace held within the window `[now - windowMs, now]`: each hold counts `gpus` times the
 * seconds it overlaps the window; one still held counts up to `now`. Pure: `now` is the caller's (the database's).
 */
export function gpuSecondsInWindow(holds: readonly GpuHold[], now: number, windowMs: number = DEFAULT_FAIR_SHARE_WINDOW_MS): Map<string, number> {
  const start = now - windowMs;
  const seconds = new Map<string, number>();
  for (const hold of holds) {
    const overlapMs = Math.min(hold.to ?? now, now) - Math.max(hold.from, start);
    if (overlapMs <= 0 || hold.gpus <= 0) continue;
    seconds.set(hold.workspaceId, (seconds.get(hold.workspaceId) ?? 0) + (hold.gpus * overlapMs) / 1000);
  }
  return seconds;
}

/**
 * A workspace's fair share: its GPU-seconds in the window divided by its weight. The lower goes first: a workspace
 * of weight 2 may use twice the GPU-seconds of one of weight 1 before its runs queue behind the other's. A weight
 * of 0 or less puts its runs behind every weighted workspace's.
 */
export function fairShare(gpuSeconds: number, weight: number): number {
  return weight > 0 ? gpuSeconds / weight : Number.POSITIVE_INFINITY;
}
