import type { Ports } from '../../dataplane/ports.js';
import { serviceCtx } from '../../dataplane/ports.js';
import type { RunnerEnd } from '../../core/jobs/states.js';
import { jobModel, jobProcessEnv } from '../../../shared/batch/job.js';
import { adoptJob, claimJob, endRunnerAttempt, lostJobs, renewJobLease, setJobHandle } from '../../services/job-runners.js';
import { finalizeJob } from '../../services/job-finalize.js';
import { expireJobs, signalJobsWaiting, unclaimedFinalizing } from '../../services/jobs.js';
import { sweepExpiredFiles } from '../../services/files.js';
import { JOBS_CHANNEL } from '../../kernel/ports/bus.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import type { ComputeBackend } from './compute.js';

/** A runner this instance holds: its backend, its attempt, its handle once submitted, and its watch. */
interface Held {
  backend: ComputeBackend;
  attempt: number;
  handle: string | null;
  abort: AbortController;
  watched: Promise<void>;
}

/**
 * Runs jobs on this instance's compute backends (docs/jobs.md, "Backends"). On each tick it expires jobs past their
 * window (and deletes files past their retention), takes over the jobs whose holder was lost (a durable backend's runner is found again by its handle; a local
 * one's attempt ends as lost), finalizes jobs nobody is finalizing, renews the leases of the runners it holds (one
 * another instance took over is let go), and starts runners for pending jobs of each backend up to its capacity. A
 * runner that ends ends its attempt: the job starts again from its checkpoint, or is finalized.
 */
export function startJobHost(ports: Ports, options: { planeUrl: () => string; backends: readonly ComputeBackend[] }): { stop(): Promise<void> } {
  const { config, logger, instanceId } = ports;
  const ctx = { ...serviceCtx(ports, 'system'), objects: ports.objects };
  const backends = new Map(options.backends.map((b) => [b.name, b]));
  const held = new Map<string, Held>();
  let stopped = false;
  let ticking: Promise<void> | null = null;

  const failed = (what: string, jobId?: string) => (error: unknown) => {
    ports.metrics.backgroundErrors.inc({ task: 'job-host' });
    logger.warn({ jobId, err: errorFields(error) }, what);
  };

  const ended = async (jobId: string, attempt: number, end: RunnerEnd) => {
    const outcome = await endRunnerAttempt({ ctx, input: { jobId, attempt, end } });
    if (outcome === 'finalize') await finalizeJob({ ctx, input: { jobId, instanceId } });
    // Its next attempt starts now, here or on another instance, not at the next tick.
    if (outcome === 'restart') await signalJobsWaiting(ctx);
  };

  /** Holds a runner until it ends (then its attempt ends), or until this instance lets it go (`abort`). */
  const watch = (backend: ComputeBackend, jobId: string, attempt: number, handle: string) => {
    const abort = new AbortController();
    const entry: Held = { backend, attempt, handle, abort, watched: Promise.resolve() };
    entry.watched = backend
      .wait(handle, abort.signal)
      .then(async (end) => {
        if (!stopped && !abort.signal.aborted) await ended(jobId, attempt, end);
      })
      .catch((error: unknown) => {
        if (!abort.signal.aborted) failed('watching a job runner failed', jobId)(error);
      })
      .finally(() => held.delete(jobId));
    held.set(jobId, entry);
  };

  const start = async (backend: ComputeBackend) => {
    const claimed = await claimJob({ ctx, input: { backend: backend.name, instanceId, leaseMs: config.jobsLeaseMs, mintToken: backend.tokenAtStart } });
    if (!claimed) return false;
    const { job, token } = claimed;
    const env = jobProcessEnv({ url: options.planeUrl(), jobId: job.id, model: jobModel(job.spec), token });
    let handle: string;
    try {
      handle = await backend.submit({ jobId: job.id, attempt: job.attempt, env, workspaceId: job.workspaceId, spec: job.spec });
    } catch (error) {
      // A backend that cannot start it now (Slurm refusing the batch, no such template): the attempt is over.
      logger.warn({ jobId: job.id, backend: backend.name, err: errorFields(error) }, 'starting a job runner failed');
      await ended(job.id, job.attempt, { kind: 'exited', code: null, signal: null });
      return true;
    }
    await setJobHandle(ctx, { jobId: job.id, attempt: job.attempt, handle });
    watch(backend, job.id, job.attempt, handle);
    return true;
  };

  const takeOver = async (lost: Awaited<ReturnType<typeof lostJobs>>[number]) => {
    const backend = backends.get(lost.backend);
    if (backend?.durable && lost.handle !== null) {
      // Another instance with this backend may find it first; the runner goes on meanwhile.
      if (!(await adoptJob({ ctx, input: { jobId: lost.id, attempt: lost.attempt, instanceId, leaseMs: config.jobsLeaseMs } }))) return;
      const seen = await backend.probe(lost.handle);
      if (seen.state === 'gone') await ended(lost.id, lost.attempt, { kind: 'lost' });
      else if (seen.state === 'ended') await ended(lost.id, lost.attempt, seen.end);
      else watch(backend, lost.id, lost.attempt, lost.handle);
      return;
    }
    // A local runner died with its host; a durable one never submitted has nothing to find. A durable backend this
    // instance lacks is left to an instance that has it.
    if (lost.backend === 'local' || (backend && lost.handle === null)) await ended(lost.id, lost.attempt, { kind: 'lost' });
  };

  const tick = async () => {
    await expireJobs(ctx);
    await sweepExpiredFiles({ ctx, input: { limit: 100 } });
    for (const lost of await lostJobs(ctx)) if (!held.has(lost.id)) await takeOver(lost);
    for (const jobId of await unclaimedFinalizing(ctx)) await finalizeJob({ ctx, input: { jobId, instanceId } });
    for (const [jobId, entry] of held) {
      const mine = await renewJobLease({ ctx, input: { jobId, attempt: entry.attempt, instanceId, leaseMs: config.jobsLeaseMs } });
      if (mine) continue;
      // Another instance took it over (this one was thought lost): a local runner stops; a durable one is theirs now.
      entry.abort.abort(new Error('taken over'));
      if (!entry.backend.durable && entry.handle) await entry.backend.cancel(entry.handle);
    }
    for (const backend of backends.values()) {
      let mine = [...held.values()].filter((h) => h.backend === backend).length;
      while (!stopped && mine < backend.capacity && (await start(backend))) mine++;
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
      .catch(failed('job host tick failed'))
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
      // Local runners stop and start again elsewhere from their checkpoint once their lease lapses; durable ones go
      // on, adopted by whichever instance takes their jobs over.
      const entries = [...held.values()];
      for (const entry of entries) entry.abort.abort(new Error('stopping'));
      await Promise.all(entries.map(async (entry) => (!entry.backend.durable && entry.handle ? await entry.backend.cancel(entry.handle) : undefined)));
      await Promise.all(entries.map((entry) => entry.watched));
    },
  };
}
