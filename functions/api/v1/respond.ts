import type { Context } from 'hono';
import type { AppEnv } from '../../dataplane/ports.js';
import { openStream } from '../http/node-io.js';
import type { InferenceResult, InferenceTiming } from '../../dataplane/result.js';
import { errorEvent, openAIErrorOf, openAIErrorResponse } from './errors.js';

const serverTiming = (t: InferenceTiming) => `queue;dur=${t.queueMs.toFixed(2)}, accel;dur=${t.accelMs.toFixed(2)}`;

/** The `/v1` answer of an inference: the runtime's own status and bytes, or OpenAI's error envelope. */
export function inferenceResponse(c: Context<AppEnv>, result: InferenceResult): Response {
  if (!result.ok) return openAIErrorResponse(c, openAIErrorOf(result.error));
  const headers: Record<string, string> = {
    'content-type': result.contentType,
    'x-lunanexa-workload-id': result.workloadId,
    'server-timing': serverTiming(result.timing),
  };
  if (result.kind === 'body') return new Response(result.body as Uint8Array<ArrayBuffer>, { status: result.status, headers });
  // Streamed: the head goes out now, then the runtime's bytes as they come (see functions/api/http/node-io.ts).
  headers['cache-control'] = 'no-cache, no-transform';
  headers['x-accel-buffering'] = 'no';
  const sink = openStream(c, result.status, headers, () => result.clientGone());
  result.pipe({
    write: (chunks) => sink.write(chunks),
    end: (chunks) => sink.end(chunks),
    fail: (chunks, code, message) => sink.end([...chunks, errorEvent(code, message)]),
    abandon: (code, message) => sink.abandon([errorEvent(code, message)]),
  });
  return sink.response;
}
