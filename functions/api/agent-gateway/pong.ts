import type { Hono } from 'hono';
import { parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { PingAnswer } from '../../../shared/contracts/stream.js';
import { machineAuth } from '../http/machine-auth.js';
import { answerPing } from '../../services/streams.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';

/**
 * POST /agent/v1/pong: the agent answers a stream `ping`. A frozen agent keeps its TCP stream (and so its lease)
 * open but stops answering, and routing stops sending it work within `streamPingTimeoutMs`.
 */
export function registerPong(app: Hono<AppEnv>) {
  app.post('/pong', machineAuth, async (c) => {
    const { machineId } = c.get('machine');
    const answer = parseOr400(PingAnswer, parseJsonOr400(c.get('rawBody')));
    const ports = c.get('ports');
    const answered = await answerPing({ ctx: serviceCtx(ports, machineId), input: { machineId, connectionId: answer.connectionId } });
    // The stream, if held here, hears it at once; one held elsewhere reads the lease row.
    if (answered) ports.dataPlane.pings.answered(answer.connectionId);
    return c.json({ answered });
  });
}
