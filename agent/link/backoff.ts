/**
 * Full-jitter exponential backoff: a random delay in [0, min(cap, base * 2^attempt)], at least `floor`.
 * `random` is injectable so the bound can be tested.
 */
export function backoffDelayMs(attempt: number, opts: { baseMs?: number; capMs?: number; floorMs?: number; random?: () => number } = {}): number {
  const base = opts.baseMs ?? 500;
  const cap = opts.capMs ?? 30_000;
  const floor = opts.floorMs ?? 100;
  const ceiling = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return Math.max(floor, Math.floor((opts.random ?? Math.random)() * ceiling));
}
