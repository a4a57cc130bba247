/**
 * Low-rate signals to the instance holding a machine's stream. Small: ids and reasons only. Invocations and their
 * frames never cross the bus: they go to the link holder directly (docs/design.md section 5).
 */
type MachineSignal = { type: 'desired' } | { type: 'revoked'; reason: string } | { type: 'logs'; requestId: string; assignmentId: string; lines: number };

/** A runtime's log tail on its way from the agent's upload to the operator request waiting for it. */
type LogLines = { type: 'log-lines'; lines: string[] };

/** Largest bus message: Postgres NOTIFY payloads must stay under 8,000 bytes. */
export const MAX_NOTIFY_BYTES = 7_900;

/** Sent to `workload:<id>`: whichever instance runs the workload cancels it. */
type WorkloadSignal = { type: 'cancel-workload' };

/**
 * Sent to `tokens` (`TOKENS_CHANNEL`) once API tokens are revoked: every instance forgets the tokens it remembers
 * for `/v1` (`TokenCache`), so the next request asks the store. No ids: revocations are rare, and which token it
 * was changes nothing about what an instance must do.
 */
type TokenSignal = { type: 'tokens-revoked' };
/** On `JOBS_CHANNEL`: a job waits for a runner (created, or to start again), so backends look now, not at their tick. */
type JobSignal = { type: 'jobs-waiting' };

export const JOBS_CHANNEL = 'jobs';
export const TOKENS_CHANNEL = 'tokens';

export type BusMessage = MachineSignal | LogLines | WorkloadSignal | TokenSignal | JobSignal;

/**
 * The relay bus port (docs/design.md section 3): in-process in one instance, Postgres LISTEN/NOTIFY across instances.
 * Channels are `machine:<id>` (signals to a machine's stream), `logs:<request id>` (uploaded log tails),
 * `workload:<id>` (cancels) and `tokens` (token revocations).
 */
export interface Bus {
  publish(channel: string, message: BusMessage): Promise<void>;
  subscribe(channel: string, handler: (message: BusMessage) => void): () => void;
  /** Channels with a subscriber in this instance: what a resync after a lost connection re-reads for. */
  localChannels(): string[];
  /** Delivers to this instance's subscribers only, as if `message` had arrived on the bus. */
  deliverLocal(channel: string, message: BusMessage): void;
  close(): Promise<void>;
}
