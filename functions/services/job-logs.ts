import { desc, eq } from 'drizzle-orm';
import { runs } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import type { ServiceCtx, ServicePorts } from './service-context.js';
import { findJob } from './jobs.js';
import { fetchWorkerLogs } from './runtime-logs.js';

/**
 * The tail of a job's runner's log (`GET /api/v1/jobs/{id}/logs`): on the `agent` backend, its latest attempt's
 * worker log, fetched from its node over the node's own link as a run worker's is (docs/jobs.md, "Agent"): the log
 * stays on the machine. A `slurm` runner's log is its output file on the site's file system, a `local` one's last
 * words are in its instance's log: 409, saying where.
 */
export async function jobLogs({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus' | 'config'>;
  input: { workspaceId: string; jobId: string; lines: number };
}): Promise<{ workerId: string; machineId: string; lines: string[] }> {
  const job = await findJob(ctx, input);
  const { backend } = job.spec;
  if (backend === 'slurm') {
    const dir = ctx.config.jobsSlurm?.logDir ?? 'the slurm log directory';
    throw new ApiError('conflict', `a slurm runner's log is its output file: ${dir}/lunanexa-${job.id}-<attempt>-<slurm id>.log`);
  }
  if (backend === 'local') throw new ApiError('conflict', "a local runner keeps no log of its own: its last words are in its instance's log");
  const [run] = await ctx.db.select({ id: runs.id }).from(runs).where(eq(runs.jobId, job.id)).orderBy(desc(runs.submittedAt)).limit(1);
  if (!run) throw new ApiError('conflict', `job ${job.id} has no runner on a node yet`);
  return await fetchWorkerLogs({ ctx, input: { workspaceId: input.workspaceId, runId: run.id, rank: 0, lines: input.lines } });
}
