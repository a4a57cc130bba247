import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Ports } from '../dataplane/ports.js';
import { serviceCtx } from '../dataplane/ports.js';
import type { RunnerEnd } from '../core/jobs/states.js';
import { claimLocalJob, endRunnerAttempt, lostJobs, renewJobLease } from '../services/job-runners.js';
import { finalizeJob } from '../services/job-finalize.js';
import { expireJobs, signalJobsWaiting, unclaimedFinalizing } from '../services/jobs.js';
import { JOBS_CHANNEL } from '../kernel/ports/bus.js';
import { errorFields } from '../kernel/telemetry/error-fields.js';

/** The runner's program in a checkout (docs/jobs.md, "The runner"). */
const RUNNER_BIN = fileURLToPath(new URL('../../bin/lunanexa-runner.mjs', import.meta.url));

interface Running {
  child: ChildProcess;
  attempt: number;
  ended: Promise<void>;
}

/**
 * The `local` backend of jobs (docs/jobs.md, "Backends"): on each tick this instance expires jobs past their window,
 * ends the attempts of runners lost with their host, finalizes jobs nobody is finalizing, renews the leases of the
 * runners it runs, and starts runners for pending local jobs, at most `jobsLocalRunners` at once, each a process of
 * its own with only the variables the runner needs (never the control plane's own: its database URL, its keys).
 * A runner that exits ends its attempt; the job starts again from its checkpoint or is finalized.
 */
export function startLocalJobs(ports: Ports, options: { planeUrl: () => string }): { stop(): Promise<void> } {
  const { config, logger, instanceId } = ports;
  const ctx = { ...serviceCtx(ports, 'system'), objects: ports.objects };
  const running = new Map<string, Running>();
  let stopped = false;
  let ticking: Promise<void> | null = null;

  const finalize = async (jobId: string) => {
    await finalizeJob({ ctx, input: { jobId, instanceId } });
  };

  const ended = async (jobId: string, attempt: number, end: RunnerEnd) => {
    const outcome = await endRunnerAttempt({ ctx, input: { jobId, attempt, end } });
    if (outcome === 'finalize') await finalize(jobId);
    // Its next attempt starts now, here or on another instance, not at the next tick.
    if (outcome === 'restart') await signalJobsWaiting(ctx);
  };

  const start = (jobId: string, attempt: number, token: string) => {
    const child = spawn(process.execPath, [RUNNER_BIN], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LUNANEXA_URL: options.planeUrl(), LUNANEXA_JOB_ID: jobId, LUNANEXA_JOB_TOKEN: token },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    // Its last words say why it stopped; its rows and answers never reach a log.
    let last = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      last = `${last}${chunk.toString('utf8')}`.slice(-2_000);
    });
    const exit = new Promise<RunnerEnd>((resolve) => {
      child.once('error', () => resolve({ kind: 'exited', code: null, signal: null }));
      child.once('exit', (code, signal) => resolve({ kind: 'exited', code, signal }));
    });
    const done = exit
      .then(async (end) => {
        if (end.kind === 'exited' && end.code !== 0) logger.warn({ jobId, attempt, code: end.code, signal: end.signal, said: last.trim() }, 'job runner ended');
        if (!stopped) await ended(jobId, attempt, end);
      })
      .catch((error: unknown) => {
        ports.metrics.backgroundErrors.inc({ task: 'local-jobs' });
        logger.warn({ jobId, err: errorFields(error) }, 'ending a job runner failed');
      })
      .finally(() => running.delete(jobId));
    running.set(jobId, { child, attempt, ended: done });
  };

  const tick = async () => {
    await expireJobs(ctx);
    for (const lost of await lostJobs(ctx)) if (!running.has(lost.id)) await ended(lost.id, lost.attempt, { kind: 'lost' });
    for (const jobId of await unclaimedFinalizing(ctx)) await finalize(jobId);
    for (const [jobId, run] of running) {
      const mine = await renewJobLease({ ctx, input: { jobId, attempt: run.attempt, instanceId, leaseMs: config.jobsLeaseMs } });
      // Another instance took it over (this one was thought lost): its runner here stops.
      if (!mine) run.child.kill('SIGTERM');
    }
    while (!stopped && running.size < config.jobsLocalRunners) {
      const claimed = await claimLocalJob({ ctx, input: { instanceId, leaseMs: config.jobsLeaseMs } });
      if (!claimed) break;
      start(claimed.job.id, claimed.job.attempt, claimed.token);
    }
  };

  // A nudge during a tick runs one more tick after it: the job that caused it may have come after the tick's claim.
  let again = false;
  const beat = (): Promise<void> => {
    if (ticking) {
      again = true;
      return ticking;
    }
    ticking = tick()
      .catch((error: unknown) => {
        ports.metrics.backgroundErrors.inc({ task: 'local-jobs' });
        logger.warn({ err: errorFields(error) }, 'local jobs tick failed');
      })
      .finally(() => {
        ticking = null;
        if (again && !stopped) {
          again = false;
          void beat();
        }
      });
    return ticking;
  };
  const timer = setInterval(beat, config.jobsTickMs);
  const unsubscribe = ports.bus.subscribe(JOBS_CHANNEL, () => void beat());
  void beat();

  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      unsubscribe();
      await ticking;
      // Stopped runners start again elsewhere from their checkpoint once their lease lapses.
      for (const run of running.values()) run.child.kill('SIGTERM');
      await Promise.all([...running.values()].map((r) => r.ended));
    },
  };
}
