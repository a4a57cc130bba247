import type { Invoke } from '../../shared/contracts/relay.js';
import { ApiError } from '../kernel/errors.js';
import { admissionOf } from '../link/forwarded.js';
import { type Admission, type HeldSlot, SlotWaitAborted } from './admission.js';

/**
 * Admits an invocation forwarded to the link holder of its machine (the peer channel on Node, the machine's object
 * on Workers): it waits for a slot of its replica in the lane its caller named, beside the holder's own requests,
 * so that every instance's calls to the replica are counted in one place. Resolves with the slot, or null when
 * `signal` ended the wait (the caller went away, or was cancelled); the deadline passing is 503 `unavailable`.
 */
export async function admitForwarded(
  admission: Admission,
  invoke: Invoke,
  header: (name: string) => string | undefined,
  signal: AbortSignal,
): Promise<HeldSlot | null> {
  const { concurrency, lane } = admissionOf(header);
  try {
    return await admission.hold(invoke.assignmentId, concurrency, invoke.deadline, signal, lane);
  } catch (error) {
    if (!(error instanceof SlotWaitAborted)) throw error;
    if (error.reason === 'deadline') throw new ApiError('unavailable', 'the replica stayed busy until the deadline');
    return null;
  }
}
