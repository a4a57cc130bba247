import type { Hono } from 'hono';
import { ApiError } from '../errors.js';
import { Frame, type FramesAccepted } from '../../shared/contracts/relay.js';
import { machineAuth, machineAuthStreamed } from '../http/machine-auth.js';
import type { FrameAcceptance } from '../relay/hub.js';
import type { AppEnv } from '../context.js';

function refuse(acceptance: Extract<FrameAcceptance, { ok: false }>): never {
  if (acceptance.reason === 'not_yours') throw new ApiError('forbidden_machine', 'a machine may upload frames only of its own invocations');
  throw new ApiError('not_found', 'unknown or finished invocation: abort the runtime call');
}

/**
 * POST /agent/v1/invocations/{id}/frames: the node's streamed NDJSON upload of one invocation's frames,
 * forwarded batch by batch as they arrive (DESIGN.md section 5, step 4). GET tells where to resume.
 */
export function registerFrames(app: Hono<AppEnv>, maxBytes: number) {
  app.get('/invocations/:id/frames', machineAuth, (c) => {
    const acceptance = c.get('ports').relay.hub.nextOffset(c.get('machine').machineId, c.req.param('id'));
    if (!acceptance.ok) refuse(acceptance);
    const body: FramesAccepted = { nextOffset: acceptance.nextOffset };
    return c.json(body);
  });

  // Not hono's bodyLimit: it buffers a chunked body whole before the handler runs, which would hold every
  // frame of a generation back until its end. The limit is enforced while streaming instead.
  app.post('/invocations/:id/frames', machineAuthStreamed, async (c) => {
    const declared = Number(c.req.header('content-length'));
    if (Number.isFinite(declared) && declared > maxBytes) throw new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`);
    const hub = c.get('ports').relay.hub;
    const { machineId } = c.get('machine');
    const invocationId = c.req.param('id');
    const known = hub.nextOffset(machineId, invocationId);
    if (!known.ok) refuse(known);
    hub.acknowledge(machineId, invocationId);
    const reader = c.req.raw.body?.getReader();
    if (!reader) throw new ApiError('bad_request', 'frames body is empty');
    const decoder = new TextDecoder();
    let buffered = '';
    let nextOffset = known.nextOffset;
    let size = 0;
    for (;;) {
      // A node that dies mid-upload breaks the body: that is the node's failure (the hub fails the
      // invocation when its stream closes), not a server error.
      const { done, value } = await reader.read().catch(() => {
        throw new ApiError('bad_request', `frames upload interrupted after offset ${nextOffset}`);
      });
      size += value?.length ?? 0;
      if (size > maxBytes) {
        await reader.cancel().catch(() => {});
        throw new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`);
      }
      if (value) buffered += decoder.decode(value, { stream: true });
      const lines = buffered.split('\n');
      buffered = done ? '' : lines.pop()!;
      const frames: Frame[] = [];
      for (const line of lines) {
        if (line.length === 0) continue;
        let parsed;
        try {
          parsed = Frame.safeParse(JSON.parse(line));
        } catch {
          parsed = null;
        }
        if (!parsed?.success) {
          await reader.cancel().catch(() => {});
          throw new ApiError('invalid_json', `frame after offset ${nextOffset} is not a valid NDJSON frame`);
        }
        frames.push(parsed.data);
      }
      if (frames.length > 0) {
        const accepted = hub.acceptFrames(machineId, invocationId, frames);
        if (!accepted.ok) {
          await reader.cancel().catch(() => {});
          refuse(accepted);
        }
        nextOffset = accepted.nextOffset;
      }
      if (done) break;
    }
    const body: FramesAccepted = { nextOffset };
    return c.json(body);
  });
}
