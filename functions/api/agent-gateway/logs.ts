import type { Hono } from 'hono';
import { and, eq } from 'drizzle-orm';
import { ApiError, parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { LogUpload } from '../../../shared/contracts/stream.js';
import { assignments } from '../../store/schema/index.js';
import { machineAuth } from '../http/machine-auth.js';
import type { AppEnv } from '../../dataplane/ports.js';
import { logAnswerChannel } from '../../services/runtime-logs.js';

/** POST /agent/v1/runtimes/{assignmentId}/logs: a machine uploads a log tail of one of its own runtimes. */
export function registerLogs(app: Hono<AppEnv>) {
  app.post('/runtimes/:assignmentId/logs', machineAuth, async (c) => {
    const ports = c.get('ports');
    const { machineId } = c.get('machine');
    const upload = parseOr400(LogUpload, parseJsonOr400(c.get('rawBody')));
    const assignmentId = c.req.param('assignmentId');
    const [owned] = await ports.store.db
      .select({ id: assignments.id })
      .from(assignments)
      .where(and(eq(assignments.id, assignmentId), eq(assignments.machineId, machineId)));
    if (!owned) throw new ApiError('forbidden_machine', 'a machine may upload logs only of its own runtimes');
    // Heard only by a request that asked this machine about this runtime (logAnswerChannel).
    await ports.bus.publish(logAnswerChannel(machineId, assignmentId, upload.requestId), { type: 'log-lines', lines: upload.lines });
    return c.json({ accepted: true }, 202);
  });
}
