import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadAverage, secondsSince } from './measure.js';

export type Metric = number | string | boolean | null;

/** Requests sent while the fault lasted (and until it healed), as the clients saw them. */
export interface RequestTally {
  sent: number;
  failed: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

/** What one scenario measured, in the form every scenario shares (the table's columns) plus its own figures. */
export interface Measured {
  /** What ran: processes, timings, the length of the fault. */
  setup: string;
  /** From the fault to the control plane noticing it (unroutable, detached, down), in seconds. */
  detectS: number | null;
  /** From the end of the fault (or the fault itself, when it does not end) to serving as before, in seconds. */
  healS: number | null;
  requests: RequestTally | null;
  /** What did not survive: requests, generations, runtimes, enrollments; "nothing" when nothing. */
  lost: string;
  /** Whether anything had to be restarted by hand (a control plane, an agent) to heal. */
  restartNeeded: boolean;
  /** Targets this run missed, each with its number: empty when every target was met. */
  missed: string[];
  metrics: Record<string, Metric>;
}

export interface ScenarioResult extends Measured {
  name: string;
  title: string;
  outcome: 'met' | 'missed' | 'error';
  error: string | null;
  startedAt: string;
  durationS: number;
  /** 1, 5 and 15 minute load averages when the scenario ended. */
  loadAvg: number[];
}

/**
 * Cleanup of one scenario: every process, cluster and directory it makes is registered as it is made and
 * undone in reverse order, also when the scenario fails or the run is interrupted. Each step is bounded.
 */
export class Scope {
  private readonly steps: Array<{ what: string; undo: () => Promise<unknown> }> = [];
  private closing: Promise<void> | null = null;

  constructor(private readonly log: (line: string) => void) {}

  defer(what: string, undo: () => Promise<unknown>): void {
    this.steps.push({ what, undo });
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const step of this.steps.splice(0).reverse()) {
        let timer: NodeJS.Timeout | undefined;
        const limit = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('took longer than 60 s')), 60_000)));
        try {
          await Promise.race([step.undo(), limit]);
        } catch (error) {
          this.log(`cleanup of ${step.what} failed: ${error instanceof Error ? error.message : String(error)}`);
        } finally {
          clearTimeout(timer);
        }
      }
    })();
    return this.closing;
  }
}

export interface ScenarioContext {
  scope: Scope;
  /** A directory of its own, removed at the end. */
  dir: string;
  /** A progress line on stderr, stamped with the seconds since the scenario started. */
  log(line: string): void;
}

export interface Scenario {
  name: string;
  title: string;
  /** Rough wall time, for the plan printed at the start; three times it ends the scenario as an error. */
  expectedS: number;
  run(ctx: ScenarioContext): Promise<Measured>;
}

/** The scope of the scenario running now: an interrupted run (Ctrl-C) still cleans it up. */
let current: Scope | null = null;
export const currentScope = () => current;

/**
 * Runs one scenario to its result: a failure of the harness is a result too (`error`), never an exception. The
 * logs of a scenario that missed a target or failed (control planes, agents, runtimes) are kept under `logsDir`.
 */
export async function runScenario(scenario: Scenario, logsDir: string): Promise<ScenarioResult> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const log = (line: string) => process.stderr.write(`[chaos ${scenario.name} +${secondsSince(started).toFixed(1)}s] ${line}\n`);
  const scope = new Scope(log);
  current = scope;
  const dir = await mkdtemp(join(tmpdir(), `lnx-chaos-${scenario.name}-`));
  scope.defer(`directory ${dir}`, () => rm(dir, { recursive: true, force: true }));
  let keepLogs = true;
  // Runs once every process is stopped, so the logs are whole.
  scope.defer('keeping the logs', async () => {
    if (keepLogs)
      await cp(dir, join(logsDir, scenario.name), { recursive: true, filter: (path) => !/\/(store|data)$/.test(path) && !/\.(jwk|token|key)$/.test(path) });
  });
  let measured: Measured | null = null;
  let error: string | null = null;
  try {
    log(`start: ${scenario.title}`);
    const limitS = scenario.expectedS * 3;
    let timer: NodeJS.Timeout | undefined;
    // A harness that stalls (a wait that never returns, a starved event loop) must still end, and clean up.
    const overrun = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`did not finish within ${limitS} s`)), limitS * 1_000)));
    measured = await Promise.race([scenario.run({ scope, dir, log }), overrun]).finally(() => clearTimeout(timer));
    keepLogs = measured.missed.length > 0;
  } catch (thrown) {
    error = thrown instanceof Error ? thrown.message : String(thrown);
    log(`error: ${error}`);
  } finally {
    log('cleaning up');
    await scope.close();
    current = null;
  }
  const result: ScenarioResult = {
    name: scenario.name,
    title: scenario.title,
    ...(measured ?? {
      setup: '',
      detectS: null,
      healS: null,
      requests: null,
      lost: 'unknown (the scenario did not finish)',
      restartNeeded: false,
      missed: [],
      metrics: {},
    }),
    outcome: error ? 'error' : measured!.missed.length ? 'missed' : 'met',
    error,
    startedAt,
    durationS: secondsSince(started),
    loadAvg: loadAverage(),
  };
  log(`done: ${result.outcome}${result.missed.length ? ` (missed: ${result.missed.join('; ')})` : ''} in ${result.durationS} s`);
  return result;
}
