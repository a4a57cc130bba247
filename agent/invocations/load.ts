import type { Invoke } from '../../shared/contracts/relay.js';
import { IDLE, type RuntimeLoad } from '../supervisor/plan.js';
import { WARM_WINDOW_MS } from '../supervisor/report.js';

/** The invocations in flight on one runtime. */
interface Tally {
  queued: number;
  active: number;
  lastServedAt: number | null;
  deadlines: Map<string, number>;
}

/**
 * The load of each runtime, as its invocations come and go: what its report says and what its drain waits for.
 * `onLoadChange` hears every change of a runtime's queued or active count; `edge` when one of them goes from 0 or to
 * 0 (worth a report at once: idleness and warmth are judged on it), else the count only moved (worth a report soon:
 * the autoscaler reads it).
 */
export function createLoadTally(onLoadChange: (assignmentId: string, edge: boolean) => void) {
  const tallies = new Map<string, Tally>();

  function tallyOf(assignmentId: string): Tally {
    let tally = tallies.get(assignmentId);
    if (tally) return tally;
    // A runtime served for the first time: the idle tallies that went cold meanwhile say nothing any more
    // (their runtimes were retired, or report cold either way), so retired assignments do not pile up.
    const now = Date.now();
    for (const [id, t] of tallies) if (t.queued + t.active === 0 && (t.lastServedAt === null || now - t.lastServedAt >= WARM_WINDOW_MS)) tallies.delete(id);
    tallies.set(assignmentId, (tally = { queued: 0, active: 0, lastServedAt: null, deadlines: new Map() }));
    return tally;
  }

  function adjust(assignmentId: string, tally: Tally, queued: number, active: number) {
    const before = [tally.queued > 0, tally.active > 0];
    tally.queued += queued;
    tally.active += active;
    onLoadChange(assignmentId, before[0] !== tally.queued > 0 || before[1] !== tally.active > 0);
  }

  return {
    /**
     * Counts one invocation on its runtime: queued until the runtime's response head arrives, active while the
     * answer streams. Counted in the same turn the runtime was chosen, so a drain starting next sees it.
     */
    track(invoke: Invoke) {
      const tally = tallyOf(invoke.assignmentId);
      let phase: 'queued' | 'active' | 'done' = 'queued';
      tally.deadlines.set(invoke.invocationId, invoke.deadline);
      adjust(invoke.assignmentId, tally, 1, 0);
      return {
        answered() {
          if (phase !== 'queued') return;
          phase = 'active';
          adjust(invoke.assignmentId, tally, -1, 1);
        },
        done() {
          if (phase === 'done') return;
          if (phase === 'active') tally.lastServedAt = Date.now();
          tally.deadlines.delete(invoke.invocationId);
          adjust(invoke.assignmentId, tally, phase === 'queued' ? -1 : 0, phase === 'active' ? -1 : 0);
          phase = 'done';
        },
      };
    },
    /** The invocations in flight on one runtime, for its report and its drain. */
    load(assignmentId: string): RuntimeLoad {
      const tally = tallies.get(assignmentId);
      if (!tally) return IDLE;
      return {
        queued: tally.queued,
        active: tally.active,
        lastServedAt: tally.lastServedAt,
        latestDeadline: tally.deadlines.size > 0 ? Math.max(...tally.deadlines.values()) : null,
      };
    },
  };
}
