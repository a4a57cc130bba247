import { ApiError } from '../kernel/errors.js';
import type { FramesAccepted } from '../../shared/contracts/relay.js';
import type { UplinkClosed } from '../../shared/contracts/uplink.js';
import { IngestRefused, ingestFrames, type IngestRefusal } from './ingest.js';
import type { LinkHolder } from './holder.js';
import type { ControlPlaneConfig } from '../kernel/config.js';

/**
 * The agent uploads as the link holder runs them, whichever door they came in by: `/agent/v1` on the instance
 * holding the machine's stream, or the peer channel from an instance the agent reached instead. The machine is
 * already authenticated. Every refusal is an `ApiError`.
 */
export interface UploadDeps {
  dataPlane: { holder: LinkHolder };
  config: Pick<ControlPlaneConfig, 'frameMaxBytes'>;
}

export const NO_STREAM = () => new ApiError('no_stream', "no live instance holds this machine's stream: reconnect it, then upload");

function refused(refusal: IngestRefusal): ApiError {
  if (refusal.kind === 'malformed') return new ApiError('invalid_frames', refusal.message);
  if (refusal.kind === 'interrupted') return new ApiError('bad_request', 'the upload broke off: frames up to the break were taken');
  if (refusal.kind === 'not_yours') return new ApiError('forbidden_machine', 'a machine may upload frames only of its own invocations');
  return new ApiError('not_found', 'unknown or finished invocation: abort the runtime call');
}

async function ingest(deps: UploadDeps, machineId: string, chunks: AsyncIterable<Uint8Array>, opts: { only?: string; from?: number; signal?: AbortSignal }) {
  try {
    return await ingestFrames(deps.dataPlane.holder, machineId, chunks, { frameMaxBytes: deps.config.frameMaxBytes, ...opts });
  } catch (error) {
    if (error instanceof IngestRefused) throw refused(error.refusal);
    throw error;
  }
}

/**
 * The machine's uplink (docs/design.md section 5, step 5), read until it ends. Bound to the machine's stream: when
 * the stream detaches, `cut` is called to end the connection. Requires the stream to be held here.
 */
export async function runUplink(deps: UploadDeps, machineId: string, chunks: AsyncIterable<Uint8Array>, cut: () => void): Promise<UplinkClosed> {
  const holder = deps.dataPlane.holder;
  if (!holder.hasLocalStream(machineId)) throw NO_STREAM();
  const ended = new AbortController();
  const offDetach = holder.onDetach(machineId, () => {
    ended.abort();
    cut();
  });
  try {
    await ingest(deps, machineId, chunks, { signal: ended.signal });
  } finally {
    offDetach();
  }
  return { closed: true };
}

/** One invocation's frames, uploaded on a request of its own (the fallback when no uplink is confirmed). */
export async function receiveFrames(
  deps: UploadDeps,
  machineId: string,
  invocationId: string,
  chunks: AsyncIterable<Uint8Array> | null,
): Promise<FramesAccepted> {
  const known = framesOffset(deps, machineId, invocationId);
  if (!chunks) throw new ApiError('bad_request', 'frames body is empty');
  return { nextOffset: await ingest(deps, machineId, chunks, { only: invocationId, from: known.nextOffset }) };
}

/** Where a broken per-invocation upload resumes. */
export function framesOffset(deps: UploadDeps, machineId: string, invocationId: string): FramesAccepted {
  const holder = deps.dataPlane.holder;
  if (!holder.hasLocalStream(machineId)) throw NO_STREAM();
  const known = holder.nextOffset(machineId, invocationId);
  if (!known.ok) throw refused({ kind: known.reason === 'not_yours' ? 'not_yours' : 'unknown', invocationId });
  return { nextOffset: known.nextOffset };
}
