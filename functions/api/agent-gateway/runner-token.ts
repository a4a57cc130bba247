import type { Hono } from 'hono';
import { parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { RunnerTokenRequest } from '../../../shared/contracts/worker.js';
import { machineAuth } from '../http/machine-auth.js';
import { grantRunnerToken } from '../../services/job-runners.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';

/**
 * POST /agent/v1/jobs/{id}/runner-token: the agent starting a worker that is a job's runner (the `agent` backend,
 * docs/jobs.md) asks for the runner's token, which the desired state never carries. Only for a worker this machine
 * holds, of the job's current run and attempt: anything else is 404, as for a job of another machine.
 */
export function registerRunnerToken(app: Hono<AppEnv>) {
  app.post('/jobs/:jobId/runner-token', machineAuth, async (c) => {
    const { machineId } = c.get('machine');
    const asked = parseOr400(RunnerTokenRequest, parseJsonOr400(c.get('rawBody')));
    const input = { machineId, jobId: c.req.param('jobId'), workerId: asked.workerId, attempt: asked.attempt };
    return c.json(await grantRunnerToken({ ctx: serviceCtx(c.get('ports'), machineId), input }));
  });
}
