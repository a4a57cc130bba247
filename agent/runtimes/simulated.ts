import type { SimulatedRuntime } from '../../shared/contracts/desired.js';
import type { LaunchSpec } from './launch.js';

/**
 * The launch of the built-in simulated runtime: this very agent (source under tsx, or the bundle) re-run with its
 * `sim-runtime` subcommand, so that the simulator is a real separate HTTP server launched like any runtime. Its
 * executable is the agent's own, so there is no digest to pin; it runs in the agent's working directory because a
 * loader the agent was started with (`--import tsx`) is resolved from there.
 */
export function simulatedLaunch(spec: SimulatedRuntime): LaunchSpec {
  return {
    executable: process.execPath,
    args: [
      ...process.execArgv,
      process.argv[1]!,
      'sim-runtime',
      '--port',
      '{port}',
      '--instance-id',
      '{instance}',
      '--model',
      spec.model,
      '--ttft-ms',
      String(spec.ttftMs),
      '--tokens-per-second',
      String(spec.tokensPerSecond),
      '--load-ms',
      String(spec.loadMs),
      '--memory-mib',
      String(spec.memoryMiB),
      '--failure-rate',
      String(spec.failureRate),
    ],
    env: {},
    healthPath: '/health',
    executableSha256: null,
    cwd: process.cwd(),
  };
}
