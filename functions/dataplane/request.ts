import type { Lane } from '../../shared/contracts/relay.js';
import type { InferencePath } from '../../shared/contracts/relay.js';
import type { Actor } from '../core/principals.js';
import type { Track } from './routing.js';

/** One inference request, validated by the surface that took it. */
export interface InferenceRequest {
  actor: Actor;
  path: InferencePath;
  kind: 'chat' | 'completions' | 'embeddings';
  /** The deployment name the client asked for. */
  model: string;
  /** The validated request body; forwarded with `model` rewritten to the runtime's model. */
  body: Record<string, unknown>;
  stream: boolean;
  /** Epoch ms. */
  deadline: number;
  idempotencyKey: string | null;
  /** Aborts when the client goes away. */
  signal: AbortSignal;
  /** `performance.now()` when the request arrived, for the request duration metric. */
  startedAt: number;
  /** Only this replica set may serve it (the benchmark gate measures the canary alone); absent: by the canary weight. */
  track?: Track;
  /** `batch`: a job's row, which waits behind interactive requests for a replica's slot; absent: interactive. */
  lane?: Lane;
}
