import { Hono, type Context } from 'hono';
import { MAX_CHECKPOINT_BYTES, RunnerCheckpoint, RunnerDone } from '../../../shared/batch/job.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { acceptCheckpoint, acceptRunnerDone, runnerJob } from '../../services/job-checkpoints.js';
import { parseBody } from './body.js';

/**
 * The routes a job's runner calls (docs/jobs.md, "The runner"), under `/v1/jobs/{id}/runner`: its job, its
 * checkpoints, the end of its input. Only the token its backend gave the job's current attempt reaches them: any
 * other token, an earlier attempt's included, gets 404, as for a job that does not exist.
 */
export function jobRunnerApi(): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const input = (c: Context<AppEnv>) => ({ jobId: c.req.param('job_id')!, tokenId: c.get('actor').tokenId });
  const ctxOf = (c: Context<AppEnv>) => ({ ...serviceCtx(c.get('ports'), c.get('actor').tokenId), objects: c.get('ports').objects });

  app.get('/:job_id/runner', async (c) => c.json(await runnerJob({ ctx: ctxOf(c), input: input(c) })));

  app.post('/:job_id/runner/checkpoints', async (c) => {
    const checkpoint = await parseBody(c, RunnerCheckpoint, MAX_CHECKPOINT_BYTES);
    return c.json(await acceptCheckpoint({ ctx: ctxOf(c), input: { ...input(c), checkpoint } }));
  });

  app.post('/:job_id/runner/done', async (c) => {
    const done = await parseBody(c, RunnerDone, 1024);
    return c.json(await acceptRunnerDone({ ctx: ctxOf(c), input: { ...input(c), done } }));
  });

  return app;
}
