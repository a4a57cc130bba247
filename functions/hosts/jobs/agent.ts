import { and, eq } from 'drizzle-orm';
import { runs, runWorkers } from '../../store/schema/index.js';
import type { ControlPlaneConfig } from '../../kernel/config.js';
import type { ServiceCtx, ServicePorts } from '../../services/service-context.js';
import { cancelRun, submitRun } from '../../services/runs.js';
import { RunSpec } from '../../../shared/contracts/run.js';
import type { RunnerEnd } from '../../core/jobs/states.js';
import { waitByProbe, type ComputeBackend, type RunnerProbe } from './compute.js';

/**
 * A runner's run name: the job's id and its attempt, within a run name's 40 characters (an attempt's run is a new
 * run: the previous one has ended, whatever its name).
 */
const runName = (jobId: string, attempt: number) => `job-${jobId.slice(jobId.indexOf('_') + 1).toLowerCase()}-${attempt}`;

/**
 * The `agent` backend (docs/jobs.md, "Backends"): each runner is a run of one worker on one of the fleet's nodes, of
 * the job template `config.template`, which the node's local policy must allow (the node decides what it runs, as
 * for runtimes). The run queues, reserves and is placed like any run (quota, fair share); it never restarts by
 * itself: its end ends the job's attempt, and the next attempt is a new run, placed wherever there is room (a
 * machine that went down takes nothing). The worker asks for its runner's token when it starts (`tokenAtStart:
 * false`): no token ever travels in a desired state or rests in a run. Durable: a run outlives any instance.
 */
export function agentBackend(ctx: ServiceCtx & ServicePorts, config: ControlPlaneConfig['jobsAgent']): ComputeBackend {
  const probe = async (handle: string): Promise<RunnerProbe> => {
    const [run] = await ctx.db.select({ state: runs.state, reason: runs.reason }).from(runs).where(eq(runs.id, handle));
    if (!run) return { state: 'gone' };
    if (run.state === 'pending') return { state: 'queued' };
    if (run.state === 'completed') return { state: 'ended', end: { kind: 'exited', code: 0, signal: null } };
    if (run.state !== 'failed') return { state: 'running' };
    const [worker] = await ctx.db
      .select({ exitCode: runWorkers.exitCode })
      .from(runWorkers)
      .where(and(eq(runWorkers.runId, handle), eq(runWorkers.rank, 0)));
    // A worker that failed with no exit code never ran, or was lost with its machine: its attempt was lost.
    const end: RunnerEnd = worker?.exitCode != null ? { kind: 'exited', code: worker.exitCode, signal: null } : { kind: 'lost' };
    return { state: 'ended', end };
  };
  return {
    name: 'agent',
    durable: true,
    tokenAtStart: false,
    capacity: config.runners,
    async submit(launch) {
      // A command job's process is its own template's; a built-in job's, the runner's.
      const { command } = launch.spec.kind === 'command' ? launch.spec : { command: null };
      const spec = RunSpec.parse({
        template: command?.template ?? config.template,
        params: command?.params ?? {},
        workers: 1,
        resources: command?.resources ?? { gpus: 0, cores: config.cores, memoryMiB: config.memoryMiB },
        failurePolicy: { action: 'fail' },
      });
      const run = await submitRun({ ctx, input: { workspaceId: launch.workspaceId, name: runName(launch.jobId, launch.attempt), spec, jobId: launch.jobId } });
      return run.id;
    },
    wait: (handle, signal) => waitByProbe(probe, handle, signal),
    async cancel(handle) {
      const [run] = await ctx.db.select({ workspaceId: runs.workspaceId, finishedAt: runs.finishedAt }).from(runs).where(eq(runs.id, handle));
      if (run && run.finishedAt === null) await cancelRun({ ctx, input: { workspaceId: run.workspaceId, id: handle } });
    },
    probe,
  };
}
