import type { Context, Hono, MiddlewareHandler } from 'hono';
import { ApiError } from '../../kernel/errors.js';
import { machineAuth, machineAuthStreamed } from '../http/machine-auth.js';
import { bodyChunks, cutConnection, limitedBody } from '../http/node-io.js';
import type { AppEnv } from '../../dataplane/ports.js';
import type { PipedAnswer } from '../../link/holder.js';
import { framesOffset, NO_STREAM, receiveFrames, runUplink } from '../../link/uploads.js';

/** Relays what the link holder answered a piped upload; no holder at all is the agent's to fix (reconnect). */
function piped(c: Context<AppEnv>, answer: PipedAnswer | null): Response {
  if (!answer) throw NO_STREAM();
  return c.body(answer.body, answer.status as 200, { 'content-type': 'application/json' });
}

/** The holder went away while the upload was piped to it: the agent's upload broke, as if its own connection had. */
async function pipe(c: Context<AppEnv>, method: 'GET' | 'POST', path: string, body: AsyncIterable<Uint8Array> | null): Promise<Response> {
  try {
    return piped(c, await c.get('ports').dataPlane.holder.pipe(c.get('machine'), method, path, body));
  } catch (error) {
    if (error instanceof ApiError) throw error;
    cutConnection(c);
    throw new ApiError('unavailable', "the instance holding this machine's link went away: upload again");
  }
}

/**
 * The agent's uploads of invocation frames (docs/design.md section 5, step 5), in the binary frames of
 * `shared/frame-codec.ts`:
 * - POST /agent/v1/uplink: the machine's one long-lived uplink, authenticated once when it opens, bound to its
 *   stream, acknowledged down the stream. Closed when the credential that opened it expires.
 * - POST /agent/v1/invocations/{id}/frames: one invocation's frames on a request of its own (the fallback when no
 *   uplink is confirmed, behind a proxy that buffers request bodies); GET tells where to resume.
 * An upload that lands on an instance that does not hold the machine's stream is piped to the one that does.
 * Not hono's bodyLimit: it buffers a chunked body whole before the handler runs, which would hold every frame
 * back until the end. Limits are enforced while streaming instead, per frame from its length field.
 */
export function registerFrames(
  app: Hono<AppEnv>,
  maxBytes: number,
  auth: { buffered: MiddlewareHandler<AppEnv>; streamed: MiddlewareHandler<AppEnv> } = { buffered: machineAuth, streamed: machineAuthStreamed },
) {
  app.post('/uplink', auth.streamed, async (c) => {
    const ports = c.get('ports');
    const { machineId, credentialExpiresAt } = c.get('machine');
    const chunks = bodyChunks(c);
    if (!chunks) throw new ApiError('bad_request', 'uplink body is empty');
    const expiry = setTimeout(() => cutConnection(c), Math.max(0, Math.min(credentialExpiresAt.getTime() - Date.now(), 2 ** 31 - 1)));
    try {
      const local = ports.dataPlane.holder.hasLocalStream(machineId);
      ports.metrics.agentUploads.inc({ kind: 'uplink', route: local ? 'local' : 'piped' });
      if (!local) return await pipe(c, 'POST', '/uplink', chunks);
      return c.json(await runUplink(ports, machineId, chunks, () => cutConnection(c)));
    } finally {
      clearTimeout(expiry);
    }
  });

  app.get('/invocations/:id/frames', auth.buffered, async (c) => {
    const ports = c.get('ports');
    const { machineId } = c.get('machine');
    const path = `/invocations/${encodeURIComponent(c.req.param('id'))}/frames`;
    if (!ports.dataPlane.holder.hasLocalStream(machineId)) return pipe(c, 'GET', path, null);
    return c.json(framesOffset(ports, machineId, c.req.param('id')));
  });

  app.post('/invocations/:id/frames', auth.streamed, async (c) => {
    const ports = c.get('ports');
    const { machineId } = c.get('machine');
    const chunks = limitedBody(c, maxBytes, () => new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`));
    const path = `/invocations/${encodeURIComponent(c.req.param('id'))}/frames`;
    const local = ports.dataPlane.holder.hasLocalStream(machineId);
    ports.metrics.agentUploads.inc({ kind: 'invocation', route: local ? 'local' : 'piped' });
    if (!local) return pipe(c, 'POST', path, chunks);
    return c.json(await receiveFrames(ports, machineId, c.req.param('id'), chunks));
  });
}
