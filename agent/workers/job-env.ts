import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import { RunnerTokenGrant } from '../../shared/contracts/worker.js';
import type { SignedClient } from '../link/http.js';
import { jobProcessEnv } from '../../shared/batch/job.js';

/**
 * A job runner's variables (docs/jobs.md, the `agent` backend): where the control plane is (where this agent dials
 * it), its job, and its token, asked for now for this worker's attempt, with the same values under the names an
 * OpenAI client reads. Throws when the control plane refuses: the worker fails and its job's attempt with it.
 */
export async function runnerJobEnv(
  client: Pick<SignedClient, 'request'>,
  baseUrl: string,
  assignment: WorkerAssignment & { job: { id: string } },
): Promise<Record<string, string>> {
  const path = `/agent/v1/jobs/${encodeURIComponent(assignment.job.id)}/runner-token`;
  const granted = await client.request('POST', path, { workerId: assignment.workerId, attempt: assignment.attempt }, RunnerTokenGrant);
  if (!granted.success) throw new Error(`the control plane gave no runner token for job ${assignment.job.id}: ${granted.error.code}: ${granted.error.message}`);
  return jobProcessEnv({ url: baseUrl, jobId: assignment.job.id, model: granted.data.model, token: granted.data.token });
}
