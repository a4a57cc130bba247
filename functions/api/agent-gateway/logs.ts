import type { Hono } from 'hono';
import { parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { LogUpload } from '../../../shared/contracts/stream.js';
import { machineAuth } from '../http/machine-auth.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { answerLogRequest } from '../../services/runtime-logs.js';

/** POST /agent/v1/runtimes/{assignmentId}/logs: a machine uploads a log tail of one of its own runtimes or workers (`wrk_…`). */
export function registerLogs(app: Hono<AppEnv>) {
  app.post('/runtimes/:assignmentId/logs', machineAuth, async (c) => {
    const { machineId } = c.get('machine');
    const upload = parseOr400(LogUpload, parseJsonOr400(c.get('rawBody')));
    const input = { machineId, assignmentId: c.req.param('assignmentId'), requestId: upload.requestId, lines: upload.lines };
    await answerLogRequest({ ctx: serviceCtx(c.get('ports'), machineId), input });
    return c.json({ accepted: true }, 202);
  });
}
