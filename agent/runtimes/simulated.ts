import type { SimulatedRuntime } from '../../shared/contracts/desired.js';
import type { RuntimeIds } from '../runtime-user.js';
import type { LaunchSpec } from './launch.js';

/** The flag by which the agent tells a simulated runtime it starts as root which ids to switch to: `--run-as <uid>:<gid>`. */
const RUN_AS_FLAG = '--run-as';

/**
 * The launch of the built-in simulated runtime: this very agent (source under tsx, or the bundle) re-run with its
 * `sim-runtime` subcommand, so that the simulator is a real separate HTTP server launched like any runtime. Its
 * executable is the agent's own, so there is no digest to pin; it runs in the agent's working directory because a
 * loader the agent was started with (`--import tsx`) is resolved from there.
 *
 * With runtime ids, it is started as the agent (root) and switches to them itself once its code is loaded
 * (`switchToRuntimeIds`), before it listens: the agent's code may lie where the runtime's user cannot read it (a
 * clone under /root, npx's link in /root/.npm), and no runtime user needs to.
 */
export function simulatedLaunch(spec: SimulatedRuntime, ids: RuntimeIds | null): LaunchSpec {
  return {
    executable: process.execPath,
    args: [
      ...process.execArgv,
      process.argv[1]!,
      'sim-runtime',
      ...(ids ? [RUN_AS_FLAG, `${ids.uid}:${ids.gid}`] : []),
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
      ...(spec.maxSequences === undefined ? [] : ['--max-sequences', String(spec.maxSequences)]),
      ...(spec.sharedTokensPerSecond === undefined ? [] : ['--shared-tokens-per-second', String(spec.sharedTokensPerSecond)]),
    ],
    env: {},
    healthPath: '/health',
    metricsPath: '/metrics',
    executableSha256: null,
    cwd: process.cwd(),
    spawnAs: null,
  };
}

/**
 * `sim-runtime`'s own argv (after the subcommand): the ids its `--run-as` names, if it leads, and the simulator's
 * flags after it. Pure.
 */
export function takeRunAs(argv: readonly string[]): { ids: RuntimeIds | null; rest: string[] } {
  if (argv[0] !== RUN_AS_FLAG) return { ids: null, rest: [...argv] };
  const match = /^(\d+):(\d+)$/.exec(argv[1] ?? '');
  if (!match) throw new Error(`${RUN_AS_FLAG} takes <uid>:<gid>, not ${argv[1] ?? 'nothing'}`);
  return { ids: { uid: Number(match[1]), gid: Number(match[2]) }, rest: argv.slice(2) };
}

/**
 * Switches this process (a simulated runtime the agent started as root) to the runtime's ids for good: no
 * supplementary group, then the group, then the user (real, effective and saved, so there is no way back). The
 * kernel marks it non-dumpable: its /proc files stay root's. It leaves the agent's working directory, which its
 * user may not be able to enter, for `/`, as template runtimes run.
 */
export function switchToRuntimeIds(ids: RuntimeIds): void {
  if (ids.uid === 0 || ids.gid === 0) throw new Error('a runtime never runs as root');
  process.setgroups!([]);
  process.setgid!(ids.gid);
  process.setuid!(ids.uid);
  process.chdir('/');
}
