/** Why a wait for a slot ended without one. */
export class SlotWaitAborted extends Error {
  constructor(readonly reason: 'deadline' | 'cancelled') {
    super(reason === 'deadline' ? 'the deadline passed while queued' : 'the request was cancelled while queued');
  }
}

/** Why `enter` refused: the deployment is full, or this token already holds its share of it. */
export type AdmissionRefusal = 'deployment' | 'token';

/**
 * Which queue of a replica a request waits in: `batch` rows (a job's runner marks them) take a freed slot only when
 * no `interactive` request waits for it (docs/jobs.md, "Batch rows and interactive traffic").
 */
export type Lane = 'interactive' | 'batch';

/** How long after the last interactive request a replica keeps slots from batch rows for the next one. */
const INTERACTIVE_QUIET_MS = 5_000;

/** The most invocations of a deployment one token holds at once: `share` of its capacity, at least 1. */
export function tokenShareOf(capacity: number, share: number): number {
  return Math.max(1, Math.floor(capacity * share));
}

/**
 * Admission and runtime concurrency of one instance. Admission bounds queued + running invocations per
 * deployment (over it: 429), and each token's share of them, so that one token cannot fill a deployment's queue
 * for every other; each replica runs at most its concurrency at once and the rest wait, interactive requests in a
 * FIFO queue ahead of batch rows in theirs, each waiter bounded by its deadline and cancellable.
 */
export class Admission {
  private readonly inFlight = new Map<string, number>();
  /** Per deployment, the invocations each token holds of it. */
  private readonly perToken = new Map<string, Map<string, number>>();
  private readonly active = new Map<string, number>();
  private readonly queues = new Map<string, Array<{ grant: () => void; lane: Lane }>>();
  /** Batch rows running on each replica, among `active`. */
  private readonly activeBatch = new Map<string, number>();
  /** When an interactive request last came for each replica (ms since the epoch). */
  private readonly interactiveAt = new Map<string, number>();
  /** Each replica's concurrency, as its last `acquire` said. */
  private readonly limits = new Map<string, number>();

  /**
   * Counts an invocation of `tokenId` against the deployment's capacity and the token's share of it (`tokenLimit`);
   * null when admitted, else why not (and nothing counted).
   */
  enter(deploymentId: string, capacity: number, tokenId: string, tokenLimit: number): AdmissionRefusal | null {
    const current = this.inFlight.get(deploymentId) ?? 0;
    if (current >= capacity) return 'deployment';
    let tokens = this.perToken.get(deploymentId);
    const mine = tokens?.get(tokenId) ?? 0;
    if (mine >= tokenLimit) return 'token';
    if (!tokens) this.perToken.set(deploymentId, (tokens = new Map()));
    tokens.set(tokenId, mine + 1);
    this.inFlight.set(deploymentId, current + 1);
    return null;
  }

  leave(deploymentId: string, tokenId: string): void {
    const current = (this.inFlight.get(deploymentId) ?? 1) - 1;
    if (current <= 0) this.inFlight.delete(deploymentId);
    else this.inFlight.set(deploymentId, current);
    const tokens = this.perToken.get(deploymentId);
    if (!tokens) return;
    const mine = (tokens.get(tokenId) ?? 1) - 1;
    if (mine > 0) tokens.set(tokenId, mine);
    else {
      tokens.delete(tokenId);
      if (tokens.size === 0) this.perToken.delete(deploymentId);
    }
  }

  /** What runs on the replica and what waits for it, batch rows included. */
  load(assignmentId: string): { active: number; queued: number } {
    return { active: this.active.get(assignmentId) ?? 0, queued: this.queues.get(assignmentId)?.length ?? 0 };
  }

  /**
   * Waits for a slot on the replica; resolves with the time spent queued, in ms. An interactive request waits behind
   * interactive ones only: it takes its place ahead of every batch row waiting. A batch row takes a slot only when no
   * interactive request waits, and, while interactive requests came to the replica lately, not its last ones
   * (`batchSlots`): those are kept for the next interactive request, which then does not wait behind batch rows.
   */
  async acquire(assignmentId: string, concurrency: number, deadline: number, signal: AbortSignal, lane: Lane = 'interactive'): Promise<number> {
    const started = performance.now();
    if (lane === 'interactive') this.interactiveAt.set(assignmentId, Date.now());
    this.limits.set(assignmentId, concurrency);
    let queue = this.queues.get(assignmentId);
    const waiting = lane === 'interactive' ? (queue?.some((e) => e.lane === 'interactive') ?? false) : (queue?.length ?? 0) > 0;
    if (!waiting && this.fits(assignmentId, lane)) {
      this.take(assignmentId, lane);
      return 0;
    }
    if (!queue) this.queues.set(assignmentId, (queue = []));
    await new Promise<void>((resolve, reject) => {
      const entry = {
        grant: () => {
          cleanup();
          resolve();
        },
        lane,
      };
      const fail = (reason: 'deadline' | 'cancelled') => {
        cleanup();
        const index = queue!.indexOf(entry);
        if (index >= 0) queue!.splice(index, 1);
        reject(new SlotWaitAborted(reason));
      };
      const timer = setTimeout(() => fail('deadline'), Math.max(0, deadline - Date.now()));
      const onAbort = () => fail('cancelled');
      const cleanup = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const firstBatch = lane === 'interactive' ? queue!.findIndex((e) => e.lane === 'batch') : -1;
      if (firstBatch >= 0) queue!.splice(firstBatch, 0, entry);
      else queue!.push(entry);
    });
    return performance.now() - started;
  }

  /** Frees a slot of `lane`, then hands free slots to the waiters that may take them, interactive ones first. */
  release(assignmentId: string, lane: Lane = 'interactive'): void {
    const running = (this.active.get(assignmentId) ?? 1) - 1;
    if (running <= 0) this.active.delete(assignmentId);
    else this.active.set(assignmentId, running);
    if (lane === 'batch') {
      const batch = (this.activeBatch.get(assignmentId) ?? 1) - 1;
      if (batch <= 0) this.activeBatch.delete(assignmentId);
      else this.activeBatch.set(assignmentId, batch);
    }
    const queue = this.queues.get(assignmentId);
    while (queue && queue.length > 0) {
      const next = queue.findIndex((e) => this.fits(assignmentId, e.lane));
      // Interactive waiters come first in the queue: a batch row is granted only when none of them waits.
      if (next < 0 || (queue[next]!.lane === 'batch' && queue.some((e) => e.lane === 'interactive'))) break;
      const [entry] = queue.splice(next, 1);
      this.take(assignmentId, entry!.lane);
      entry!.grant();
    }
    if (queue?.length === 0) this.queues.delete(assignmentId);
    // A replica idle and quiet is forgotten: replicas come and go with rollouts.
    const quiet = Date.now() - (this.interactiveAt.get(assignmentId) ?? 0) > INTERACTIVE_QUIET_MS;
    if (quiet && !this.active.has(assignmentId) && !this.queues.has(assignmentId)) {
      this.interactiveAt.delete(assignmentId);
      this.limits.delete(assignmentId);
    }
  }

  /**
   * The slots batch rows may hold on a replica of `concurrency` now: all of them while no interactive request came
   * for `INTERACTIVE_QUIET_MS`, else half of them (at least one, and at least one kept for interactive traffic).
   * Measured with `npm run bench:batch`: keeping a third left interactive requests waiting behind batch rows often
   * enough to raise their TTFT p99 by half.
   */
  private batchSlots(assignmentId: string, concurrency: number): number {
    const lastInteractive = this.interactiveAt.get(assignmentId);
    if (lastInteractive === undefined || Date.now() - lastInteractive > INTERACTIVE_QUIET_MS) return concurrency;
    return Math.max(1, Math.min(concurrency - 1, Math.floor(concurrency / 2)));
  }

  private fits(assignmentId: string, lane: Lane): boolean {
    const concurrency = this.limits.get(assignmentId) ?? 1;
    if ((this.active.get(assignmentId) ?? 0) >= concurrency) return false;
    return lane === 'interactive' || (this.activeBatch.get(assignmentId) ?? 0) < this.batchSlots(assignmentId, concurrency);
  }

  private take(assignmentId: string, lane: Lane): void {
    this.active.set(assignmentId, (this.active.get(assignmentId) ?? 0) + 1);
    if (lane === 'batch') this.activeBatch.set(assignmentId, (this.activeBatch.get(assignmentId) ?? 0) + 1);
  }
}
