import type { Lane } from '../../shared/contracts/relay.js';
import { type BatchBackoff, batchSlotsOf, initialBackoff, observeInteractiveTtft } from '../core/scheduler/batch-backoff.js';

/** Why a wait for a slot ended without one. */
export class SlotWaitAborted extends Error {
  constructor(readonly reason: 'deadline' | 'cancelled') {
    super(reason === 'deadline' ? 'the deadline passed while queued' : 'the request was cancelled while queued');
  }
}

/** A slot of a replica held for one invocation. */
export interface HeldSlot {
  /** Time spent queued for it (ms). */
  readonly queueMs: number;
  /** The invocation's first body bytes arrived (its TTFT since the slot was granted). */
  firstByte(): void;
  /** Frees it; later calls do nothing. */
  release(): void;
}

/** Why `enter` refused: the deployment is full, or this token already holds its share of it. */
export type AdmissionRefusal = 'deployment' | 'token';

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
  /** Per replica, how far batch rows back off for its interactive TTFT (`core/scheduler/batch-backoff.ts`). */
  private readonly backoff = new Map<string, BatchBackoff>();
  /** Invocations this instance sent to a replica whose slots its link holder counts elsewhere: a routing hint. */
  private readonly forwarded = new Map<string, number>();

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

  /**
   * What runs on the replica and what waits ahead of a request of `lane` for it, as this instance knows it: its own
   * slots, and what it forwarded to a link holder elsewhere (which counts those slots; see `forwardedSlot`). An
   * interactive request waits behind interactive ones only, so batch rows queued do not make a replica look busy
   * to it; running ones do, as they hold slots.
   */
  load(assignmentId: string, lane: Lane = 'batch'): { active: number; queued: number } {
    const active = (this.active.get(assignmentId) ?? 0) + (this.forwarded.get(assignmentId) ?? 0);
    const queue = this.queues.get(assignmentId);
    if (!queue || lane === 'batch') return { active, queued: queue?.length ?? 0 };
    // Per pick of every request: counted without building an array.
    let queued = 0;
    for (const entry of queue) if (entry.lane === 'interactive') queued += 1;
    return { active, queued };
  }

  private forwarding(assignmentId: string, delta: 1 | -1): void {
    const count = (this.forwarded.get(assignmentId) ?? 0) + delta;
    if (count > 0) this.forwarded.set(assignmentId, count);
    else this.forwarded.delete(assignmentId);
  }

  /**
   * Waits for a slot of the replica in `lane` (see `acquire`) and holds it for one invocation: its `firstByte`
   * moves the slots batch rows may hold on the replica while interactive requests come (`batch-backoff.ts`).
   */
  async hold(assignmentId: string, concurrency: number, deadline: number, signal: AbortSignal, lane: Lane): Promise<HeldSlot> {
    const queueMs = await this.acquire(assignmentId, concurrency, deadline, signal, lane);
    const grantedAt = performance.now();
    let held = true;
    return {
      queueMs,
      firstByte: () => {
        if (held && lane === 'interactive') this.observeTtft(assignmentId, concurrency, performance.now() - grantedAt);
      },
      release: () => {
        if (!held) return;
        held = false;
        this.release(assignmentId, lane);
      },
    };
  }

  /**
   * The slot of an invocation sent to a replica whose link holder is elsewhere: that holder admits it and counts
   * the slot; here it is only a routing hint (`load`) until released.
   */
  forwardedSlot(assignmentId: string): HeldSlot {
    this.forwarding(assignmentId, 1);
    let held = true;
    return {
      queueMs: 0,
      firstByte: () => {},
      release: () => {
        if (!held) return;
        held = false;
        this.forwarding(assignmentId, -1);
      },
    };
  }

  private observeTtft(assignmentId: string, concurrency: number, ttftMs: number): void {
    const state = this.backoff.get(assignmentId) ?? initialBackoff(concurrency);
    this.backoff.set(assignmentId, observeInteractiveTtft(state, ttftMs, concurrency));
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
      this.backoff.delete(assignmentId);
    }
  }

  /**
   * The slots batch rows may hold on a replica of `concurrency` now: all of them while no interactive request came
   * for `INTERACTIVE_QUIET_MS`, else their share, lowered while interactive TTFT rises (`batch-backoff.ts`).
   */
  private batchSlots(assignmentId: string, concurrency: number): number {
    const lastInteractive = this.interactiveAt.get(assignmentId);
    if (lastInteractive === undefined || Date.now() - lastInteractive > INTERACTIVE_QUIET_MS) return concurrency;
    return batchSlotsOf(this.backoff.get(assignmentId) ?? initialBackoff(concurrency), concurrency);
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
