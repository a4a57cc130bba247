import { Hono } from 'hono';
import type { AppEnv } from '../../dataplane/ports.js';
import { limitBody } from '../http/body-limit.js';
import { registerEnroll } from './enroll.js';
import { registerHeartbeat } from './heartbeat.js';
import { registerCredentials } from './credentials.js';
import { registerStream } from './stream.js';
import { registerLogs } from './logs.js';
import { registerFrames } from './frames.js';
import { registerTime } from './time.js';
import { registerPong } from './pong.js';
import { registerRunnerToken } from './runner-token.js';

/** The southbound surface `/agent/v1`: everything a node agent calls over its own outbound connection. */
export function agentGateway(maxBodyBytes: number, framesMaxBytes: number): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  // Frame uploads stream long generations (the uplink, all of them): they bound their frames instead.
  const limit = limitBody(maxBodyBytes);
  const streamed = (path: string) => path.endsWith('/frames') || path.endsWith('/uplink');
  app.use('*', async (c, next) => (c.req.method === 'POST' && streamed(c.req.path) ? next() : limit(c, next)));
  registerFrames(app, framesMaxBytes);
  registerEnroll(app);
  registerTime(app);
  registerStream(app);
  registerHeartbeat(app);
  registerCredentials(app);
  registerLogs(app);
  registerPong(app);
  registerRunnerToken(app);
  return app;
}
