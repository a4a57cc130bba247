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
   * Waits for a slot on the replica; resolves with the time spent queued, in ms. An interactive request waits
   * behind interactive ones only: it takes its place ahead of every batch row waiting.
   */
  async acquire(assignmentId: string, concurrency: number, deadline: number, signal: AbortSignal, lane: Lane = 'interactive'): Promise<number> {
    const started = performance.now();
    const running = this.active.get(assignmentId) ?? 0;
    if (running < concurrency && !this.queues.get(assignmentId)?.length) {
      this.active.set(assignmentId, running + 1);
      return 0;
    }
    let queue = this.queues.get(assignmentId);
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

  /** Frees a slot, handing it straight to the next waiter if there is one. */
  release(assignmentId: string): void {
    const next = this.queues.get(assignmentId)?.shift();
    if (next) {
      next.grant();
      return;
    }
    const running = (this.active.get(assignmentId) ?? 1) - 1;
    if (running <= 0) this.active.delete(assignmentId);
    else this.active.set(assignmentId, running);
  }
}
