import type { ServerResponse } from 'node:http';
import { DEADLINE_ERROR, errorBody, type RequestError } from './errors.js';
import { sendJson } from './http.js';
import type { SimStats } from './options.js';

export type Outcome = 'completed' | 'aborted' | 'failed';

/** Per-request bookkeeping so every counted request settles exactly once. */
export interface Tracker {
  settled: boolean;
  deadlineAt: number | undefined; // performance.now() timebase
  timer: NodeJS.Timeout | undefined;
  immediate: NodeJS.Immediate | undefined;
  /** Gives back what the request holds beyond its timers (its slot in the batch), however it ends. */
  release: (() => void) | undefined;
}

/**
 * The stats of inference requests and the one way each of them ends: `settle` counts the outcome once and stops
 * the request's timers, whichever of completion, abort, failure or deadline comes first.
 */
export function createLedger(stats: SimStats) {
  function clearTimers(t: Tracker): void {
    if (t.timer !== undefined) clearTimeout(t.timer);
    if (t.immediate !== undefined) clearImmediate(t.immediate);
    t.timer = undefined;
    t.immediate = undefined;
  }

  function settle(t: Tracker, outcome: Outcome): void {
    if (t.settled) return;
    t.settled = true;
    clearTimers(t);
    t.release?.();
    stats.active--;
    stats[outcome]++;
  }

  return {
    /** Counts tokens written to a streamed answer. */
    streamed(tokens: number): void {
      stats.tokensStreamed += tokens;
    },
    /** Counts a new inference request; a disconnect at any later stage settles it as aborted. */
    open(res: ServerResponse): Tracker {
      const t: Tracker = { settled: false, deadlineAt: undefined, timer: undefined, immediate: undefined, release: undefined };
      stats.requests++;
      stats.active++;
      if (stats.active > stats.peakActive) stats.peakActive = stats.active;
      res.on('close', () => {
        if (!t.settled) settle(t, 'aborted');
      });
      return t;
    },
    settle,
    fail(t: Tracker, res: ServerResponse, err: RequestError, headers?: Record<string, string>): void {
      settle(t, 'failed');
      sendJson(res, err.status, errorBody(err.message, err.type, err.code, err.param), headers);
    },
    /** Waits `ms` unless the deadline comes first; in that case the request is aborted with 504. */
    after(t: Tracker, res: ServerResponse, ms: number, then: () => void): void {
      const now = performance.now();
      const deadlineFirst = t.deadlineAt !== undefined && t.deadlineAt < now + ms;
      const wait = deadlineFirst ? (t.deadlineAt as number) - now : ms;
      const fire = (): void => {
        t.timer = undefined;
        if (t.settled) return;
        if (deadlineFirst) {
          settle(t, 'aborted');
          sendJson(res, 504, errorBody(DEADLINE_ERROR.message, DEADLINE_ERROR.type, DEADLINE_ERROR.code, null));
          return;
        }
        then();
      };
      if (wait <= 0) fire();
      else t.timer = setTimeout(fire, wait);
    },
  };
}
export type Ledger = ReturnType<typeof createLedger>;
