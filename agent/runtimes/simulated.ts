import type { Assignment } from '../../shared/contracts/desired.js';
import { ProcessAdapter, type LaunchPlan } from './process.js';
import type { RuntimeAdapter } from './adapter.js';

/**
 * argv that re-runs this very agent (source under tsx, or the bundle) with its `sim-runtime` subcommand, so
 * the simulated runtime is a real separate HTTP server launched through the `process` adapter.
 */
function selfCommand(): string[] {
  return [process.execPath, ...process.execArgv, process.argv[1]!];
}

/** The launch plan of a `simulated` runtime spec. */
function simulatedPlan(assignment: Assignment): LaunchPlan {
  const spec = assignment.runtime;
  if (spec.kind !== 'simulated') throw new Error('not a simulated runtime');
  return {
    command: [
      ...selfCommand(),
      'sim-runtime',
      '--port', '{port}',
      '--instance-id', '{instance}',
      '--model', spec.model,
      '--ttft-ms', String(spec.ttftMs),
      '--tokens-per-second', String(spec.tokensPerSecond),
      '--load-ms', String(spec.loadMs),
      '--memory-mib', String(spec.memoryMiB),
      '--failure-rate', String(spec.failureRate),
    ],
    env: {},
    healthPath: '/health',
  };
}

/** The launch plan of a `process` runtime spec (an OpenAI-compatible server command such as vLLM's). */
function processPlan(assignment: Assignment): LaunchPlan {
  const spec = assignment.runtime;
  if (spec.kind !== 'process') throw new Error('not a process runtime');
  return { command: spec.command, env: spec.env, healthPath: spec.healthPath };
}

/**
 * The adapters of this agent, by runtime kind. Both kinds are processes: one adapter serves them, so a runtime
 * whose kind changes keeps one record and one log ring.
 */
export function createAdapters(stateDir: string, log: (event: string, fields?: Record<string, unknown>) => void): Record<Assignment['runtime']['kind'], RuntimeAdapter> {
  const adapter = new ProcessAdapter(stateDir, (assignment) => (assignment.runtime.kind === 'simulated' ? simulatedPlan(assignment) : processPlan(assignment)), log);
  return { process: adapter, simulated: adapter };
}
