/** Why a wait for a slot ended without one. */
export class SlotWaitAborted extends Error {
  constructor(readonly reason: 'deadline' | 'cancelled') {
    super(reason === 'deadline' ? 'the deadline passed while queued' : 'the request was cancelled while queued');
  }
}

/**
 * Admission and runtime concurrency of one instance. Admission bounds queued + running invocations per
 * deployment (over it: 429); each replica runs at most its concurrency at once and the rest wait in a FIFO
 * queue, each waiter bounded by its deadline and cancellable.
 */
export class Admission {
  private readonly inFlight = new Map<string, number>();
  private readonly active = new Map<string, number>();
  private readonly queues = new Map<string, Array<{ grant: () => void }>>();

  /** Counts an invocation against the deployment's capacity; false (and nothing counted) when it is full. */
  enter(deploymentId: string, capacity: number): boolean {
    const current = this.inFlight.get(deploymentId) ?? 0;
    if (current >= capacity) return false;
    this.inFlight.set(deploymentId, current + 1);
    return true;
  }

  leave(deploymentId: string): void {
    const current = (this.inFlight.get(deploymentId) ?? 1) - 1;
    if (current <= 0) this.inFlight.delete(deploymentId);
    else this.inFlight.set(deploymentId, current);
  }

  load(assignmentId: string): { active: number; queued: number } {
    return { active: this.active.get(assignmentId) ?? 0, queued: this.queues.get(assignmentId)?.length ?? 0 };
  }

  /** Waits for a slot on the replica; resolves with the time spent queued, in ms. */
  async acquire(assignmentId: string, concurrency: number, deadline: number, signal: AbortSignal): Promise<number> {
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
      queue!.push(entry);
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
