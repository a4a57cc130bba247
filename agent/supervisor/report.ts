import type { Assignment } from '../../shared/contracts/desired.js';
import type { MachineStatus, RuntimeReport, RuntimeState, StartupProgress } from '../../shared/contracts/heartbeat.js';
import type { RuntimeLoad } from './plan.js';

/** A runtime that served within this window still has its caches hot. */
export const WARM_WINDOW_MS = 5 * 60_000;

const LAUNCHING: ReadonlySet<RuntimeState> = new Set(['preparing', 'pulling', 'starting']);

/**
 * The heartbeat contract's bound on a runtime's message. A longer one (a refusal quoting a 4 KiB path from an
 * assignment) is cut, never sent whole: the control plane would refuse the heartbeat and the machine would go down.
 */
const MAX_MESSAGE = 500;

/** A download in progress before a runtime starts. */
export interface Pull {
  /** Epoch ms when it began: the start timeout is held from then on. */
  since: number;
  bytesDone: number;
  bytesTotal: number;
}

/** What the report of one runtime is made of. */
export interface RuntimeFacts {
  assignment: Assignment;
  state: RuntimeState;
  gen: number;
  restarts: number;
  message: string | null;
  /** Epoch ms when the launch in progress began (an adopted runtime: when it was started); null when none is. */
  launchStartedAt: number | null;
  /** The download in progress, while `pulling`. */
  pull?: Pull | null;
  load: RuntimeLoad;
}

/** One runtime's report: every field measured, none constant. Pure. */
export function runtimeReport(facts: RuntimeFacts, now: number): RuntimeReport {
  const { assignment, state, load } = facts;
  const launching = LAUNCHING.has(state) && facts.launchStartedAt !== null;
  const pull = facts.pull ?? null;
  return {
    assignmentId: assignment.assignmentId,
    deploymentId: assignment.deploymentId,
    state,
    gen: facts.gen,
    activeInvocations: load.active,
    queueDepth: load.queued,
    warm: state === 'ready' && (load.active > 0 || (load.lastServedAt !== null && now - load.lastServedAt < WARM_WINDOW_MS)),
    progress: launching ? startupProgress(facts.launchStartedAt!, pull, assignment.startup.timeoutMs, now) : null,
    restarts: facts.restarts,
    message: facts.message !== null && facts.message.length > MAX_MESSAGE ? `${facts.message.slice(0, MAX_MESSAGE - 1)}…` : facts.message,
    // Read by the engine sampler, apart from the supervisor (agent/telemetry/): the heartbeat joins the two.
    engine: null,
  };
}

/**
 * Time counted against the start timeout (held while pulling: the time before the pull), and while pulling the
 * bytes done against the total. Pure.
 */
function startupProgress(launchStartedAt: number, pull: Pull | null, timeoutMs: number, now: number): StartupProgress {
  const elapsedMs = Math.max(0, (pull ? pull.since : now) - launchStartedAt);
  return pull ? { elapsedMs, timeoutMs, bytesDone: pull.bytesDone, bytesTotal: pull.bytesTotal } : { elapsedMs, timeoutMs };
}

/** `draining` while the agent shuts down, `degraded` while a runtime is failed, else `ready`. Pure. */
export function machineStatus(shuttingDown: boolean, states: readonly RuntimeState[]): MachineStatus {
  if (shuttingDown) return 'draining';
  return states.includes('failed') ? 'degraded' : 'ready';
}

/** The models loaded in a ready runtime, each once, in a stable order. Pure. */
export function warmModels(runtimes: ReadonlyArray<{ assignment: Assignment; state: RuntimeState }>): string[] {
  return [...new Set(runtimes.filter((r) => r.state === 'ready').map((r) => r.assignment.model))].sort();
}
