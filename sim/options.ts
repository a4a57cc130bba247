import { z } from 'zod';
import { SIM_MAX_SEQUENCES, SIM_MAX_TOKENS_PER_SECOND } from '../shared/contracts/desired.js';

export interface SimServerOptions {
  port: number;
  /** Defaults to 127.0.0.1. */
  host?: string;
  model: string;
  ttftMs: number;
  /** Infinity or 0 means as fast as possible. */
  tokensPerSecond: number;
  loadMs: number;
  memoryMiB: number;
  /** Probability in 0..1 that an accepted inference request fails. */
  failureRate: number;
  /** Generation requests served at once (1..4096); later ones wait in FIFO order. Absent: no limit. */
  maxSequences?: number;
  /** Tokens per second shared evenly among running sequences, each still capped at `tokensPerSecond`. Absent: none. */
  sharedTokensPerSecond?: number;
  instanceId?: string;
  seed?: number;
  /**
   * The secret every call must carry as `Authorization: Bearer <token>` (the agent's LUNANEXA_RUNTIME_TOKEN);
   * without it, any call is answered. Never a flag: another user on the node can read a process's argv.
   */
  token?: string;
}

/**
 * Counters for inference requests (chat, completions, embeddings). Every counted request
 * ends in exactly one of completed/aborted/failed, so
 * `requests === completed + aborted + failed + active` always holds.
 * `failed` covers every error answer (bad input, loading, past deadline, simulated faults);
 * `aborted` covers client disconnects and deadlines that expire mid-generation.
 */
export interface SimStats {
  requests: number;
  completed: number;
  aborted: number;
  failed: number;
  active: number;
  /** The most requests in flight at once since the runtime started: what admission let through together. */
  peakActive: number;
  /** Tokens written to streamed answers so far: how far a client that stopped reading let generation run. */
  tokensStreamed: number;
  /** Idempotency-Key of the most recent inference request; null when it carried none. */
  lastIdempotencyKey: string | null;
  /**
   * X-LunaNexa-Deadline of the most recent inference request, normalised to ISO-8601
   * (kept verbatim when unparseable); null when absent.
   */
  lastDeadline: string | null;
}

export interface SimServerHandle {
  port: number;
  url: string;
  close(): Promise<void>;
  stats(): SimStats;
}

const finiteNonNegative = z.number().min(0);

export const SimOptions = z.object({
  port: z.number().int().min(0).max(65535),
  host: z.string().min(1).optional(),
  model: z.string({ error: (iss) => (iss.input === undefined ? 'is required' : 'expected a string') }).min(1),
  ttftMs: finiteNonNegative,
  tokensPerSecond: z.union([finiteNonNegative, z.literal(Number.POSITIVE_INFINITY)]),
  loadMs: finiteNonNegative,
  memoryMiB: finiteNonNegative,
  failureRate: z.number().min(0).max(1),
  maxSequences: z.number().int().min(1).max(SIM_MAX_SEQUENCES).optional(),
  sharedTokensPerSecond: z.number().positive().max(SIM_MAX_TOKENS_PER_SECOND).optional(),
  instanceId: z.string().min(1).optional(),
  seed: z.number().int().optional(),
  token: z.string().min(1).optional(),
});
export type SimOptions = z.output<typeof SimOptions>;

/** Each option's flag: errors name what the operator typed, whether the options came from flags or from code. */
export const FLAG_TO_KEY = {
  '--port': 'port',
  '--host': 'host',
  '--model': 'model',
  '--ttft-ms': 'ttftMs',
  '--tokens-per-second': 'tokensPerSecond',
  '--load-ms': 'loadMs',
  '--memory-mib': 'memoryMiB',
  '--failure-rate': 'failureRate',
  '--max-sequences': 'maxSequences',
  '--shared-tokens-per-second': 'sharedTokensPerSecond',
  '--instance-id': 'instanceId',
  '--seed': 'seed',
} as const satisfies Record<string, keyof SimServerOptions>;

export type FlagName = keyof typeof FLAG_TO_KEY;

const KEY_TO_FLAG = Object.fromEntries(Object.entries(FLAG_TO_KEY).map(([flag, key]) => [key, flag])) as Record<keyof SimServerOptions, FlagName>;

export function describeIssues(issues: readonly z.core.$ZodIssue[]): string {
  return issues
    .map((issue) => {
      const key = issue.path[0];
      const flag = typeof key === 'string' && key in KEY_TO_FLAG ? KEY_TO_FLAG[key as keyof SimServerOptions] : 'options';
      return `${flag}: ${issue.message}`;
    })
    .join('; ');
}
