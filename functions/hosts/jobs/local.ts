import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { RunnerEnd } from '../../core/jobs/states.js';
import type { Logger } from '../../kernel/telemetry/logger.js';
import type { ComputeBackend, RunnerLaunch, RunnerProbe } from './compute.js';

/** The runner's program in a checkout (docs/jobs.md, "The runner"). */
export const RUNNER_BIN = fileURLToPath(new URL('../../../bin/lunanexa-runner.mjs', import.meta.url));

interface LocalRunner {
  child: ChildProcess;
  /** Set once it ended, and how. */
  end: RunnerEnd | null;
  ended: Promise<RunnerEnd>;
}

/**
 * The `local` backend (docs/jobs.md, "Backends"): each runner a child process of this instance, with only the
 * variables the runner needs (never the control plane's own: its database URL, its keys). Its runners die with the
 * instance: not durable. A handle names a runner of this process only.
 */
export function localBackend(opts: { capacity: number; logger: Logger }): ComputeBackend {
  const runners = new Map<string, LocalRunner>();
  let next = 0;
  return {
    name: 'local',
    durable: false,
    tokenAtStart: true,
    capacity: opts.capacity,
    async submit(launch: RunnerLaunch) {
      const child = spawn(process.execPath, [RUNNER_BIN], {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...launch.env },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      // Its last words say why it stopped; its rows and answers never reach a log.
      let last = '';
      child.stderr?.on('data', (chunk: Buffer) => {
        last = `${last}${chunk.toString('utf8')}`.slice(-2_000);
      });
      const handle = `local-${process.pid}-${++next}`;
      const runner: LocalRunner = {
        child,
        end: null,
        ended: new Promise<RunnerEnd>((resolve) => {
          child.once('error', () => resolve({ kind: 'exited', code: null, signal: null }));
          child.once('exit', (code, signal) => resolve({ kind: 'exited', code, signal }));
        }).then((end) => {
          runner.end = end;
          if (end.kind === 'exited' && end.code !== 0) {
            opts.logger.warn({ jobId: launch.jobId, attempt: launch.attempt, code: end.code, signal: end.signal, said: last.trim() }, 'job runner ended');
          }
          return end;
        }),
      };
      runners.set(handle, runner);
      return handle;
    },
    async wait(handle, signal) {
      const runner = runners.get(handle);
      if (!runner) return { kind: 'lost' };
      const aborted = new Promise<never>((_, reject) => {
        if (signal.aborted) reject(signal.reason);
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
      try {
        return await Promise.race([runner.ended, aborted]);
      } finally {
        if (runner.end) runners.delete(handle);
      }
    },
    async cancel(handle) {
      const runner = runners.get(handle);
      if (!runner || runner.end) return;
      runner.child.kill('SIGTERM');
      await runner.ended;
    },
    async probe(handle): Promise<RunnerProbe> {
      const runner = runners.get(handle);
      if (!runner) return { state: 'gone' };
      return runner.end ? { state: 'ended', end: runner.end } : { state: 'running' };
    },
  };
}
