import type { Hono } from 'hono';
import { ApiError } from '../errors.js';
import { Frame, type FramesAccepted } from '../../shared/contracts/relay.js';
import { machineAuth, machineAuthStreamed } from '../http/machine-auth.js';
import { limitedBody } from '../http/node-io.js';
import type { FrameAcceptance } from '../relay/hub.js';
import type { AppEnv } from '../context.js';

function refuse(acceptance: Extract<FrameAcceptance, { ok: false }>): never {
  if (acceptance.reason === 'not_yours') throw new ApiError('forbidden_machine', 'a machine may upload frames only of its own invocations');
  throw new ApiError('not_found', 'unknown or finished invocation: abort the runtime call');
}

/**
 * POST /agent/v1/invocations/{id}/frames: the node's streamed NDJSON upload of one invocation's frames,
 * forwarded batch by batch as they arrive (docs/design.md section 5, step 4). GET tells where to resume.
 *
 * Lines are cut on the bytes as they arrive (a newline byte is never inside a UTF-8 sequence) and each complete
 * line is decoded once: the work per chunk is its own length, whatever the size of the line it belongs to. A line
 * is bounded (`lineMaxBytes`, 1 MiB: the agent sends data in pieces of 32 K characters), so a line past it is
 * refused (413) as soon as it passes it, and the rest of the upload is discarded unread into memory.
 */
export function registerFrames(app: Hono<AppEnv>, maxBytes: number, lineMaxBytes: number) {
  app.get('/invocations/:id/frames', machineAuth, (c) => {
    const acceptance = c.get('ports').relay.hub.nextOffset(c.get('machine').machineId, c.req.param('id'));
    if (!acceptance.ok) refuse(acceptance);
    const body: FramesAccepted = { nextOffset: acceptance.nextOffset };
    return c.json(body);
  });

  const lineTooLong = () => new ApiError('payload_too_large', `a frame line exceeds ${lineMaxBytes} bytes`);

  // Not hono's bodyLimit: it buffers a chunked body whole before the handler runs, which would hold every
  // frame of a generation back until its end. The limit is enforced while streaming instead.
  app.post('/invocations/:id/frames', machineAuthStreamed, async (c) => {
    const chunks = limitedBody(c, maxBytes, () => new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`));
    const hub = c.get('ports').relay.hub;
    const { machineId } = c.get('machine');
    const invocationId = c.req.param('id');
    const known = hub.nextOffset(machineId, invocationId);
    if (!known.ok) refuse(known);
    hub.acknowledge(machineId, invocationId);
    if (!chunks) throw new ApiError('bad_request', 'frames body is empty');
    /** The bytes of the line still open at the end of the last chunk. */
    const open: Uint8Array[] = [];
    let openBytes = 0;
    let nextOffset = known.nextOffset;
    // Leaving the loop by a throw ends the body (the for-await closes it): nothing more is read.
    try {
      for await (const chunk of chunks) {
        const lines: string[] = [];
        let start = 0;
        for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
          const piece = chunk.subarray(start, newline);
          if (openBytes + piece.length > lineMaxBytes) throw lineTooLong();
          lines.push(decodeLine(open, piece));
          open.length = 0;
          openBytes = 0;
          start = newline + 1;
        }
        if (start < chunk.length) {
          openBytes += chunk.length - start;
          if (openBytes > lineMaxBytes) throw lineTooLong();
          open.push(chunk.subarray(start));
        }
        if (lines.length > 0) nextOffset = accept(lines, nextOffset);
      }
    } catch (error) {
      // A node that dies mid-upload breaks the body: that is the node's failure (the hub fails the
      // invocation when its stream closes), not a server error.
      if (error instanceof ApiError) throw error;
      throw new ApiError('bad_request', `frames upload interrupted after offset ${nextOffset}`);
    }
    if (openBytes > 0) nextOffset = accept([decodeLine(open, new Uint8Array(0))], nextOffset);

    /** Parses complete lines and hands their frames to the hub. */
    function accept(lines: string[], offset: number): number {
      const frames: Frame[] = [];
      for (const line of lines) {
        if (line.length === 0) continue;
        let parsed;
        try {
          parsed = Frame.safeParse(JSON.parse(line));
        } catch {
          parsed = null;
        }
        if (!parsed?.success) throw new ApiError('invalid_json', `frame after offset ${offset} is not a valid NDJSON frame`);
        frames.push(parsed.data);
      }
      if (frames.length === 0) return offset;
      const accepted = hub.acceptFrames(machineId, invocationId, frames);
      if (!accepted.ok) refuse(accepted);
      return accepted.nextOffset;
    }
    const body: FramesAccepted = { nextOffset };
    return c.json(body);
  });
}

const decoder = new TextDecoder();

/** One complete line: the bytes left open by earlier chunks, then `last`. */
function decodeLine(open: readonly Uint8Array[], last: Uint8Array): string {
  if (open.length === 0) return decoder.decode(last);
  return decoder.decode(Buffer.concat([...open, last]));
}
