import { z } from 'zod';

/** The most replicas an autoscaled deployment may be given (as a canary's and `replicasPerMachine`'s bounds). */
export const MAX_AUTOSCALE_REPLICAS = 64;
/** The slowest TTFT p95 a target may name: ten minutes, the longest a first token is worth waiting for. */
export const MAX_TTFT_TARGET_MS = 600_000;
/** The longest a recommendation must stay above the count before a scale-up: an hour. */
export const MAX_SCALE_UP_AFTER_MS = 3_600_000;
/** The longest it must stay below before a scale-down: a day. */
export const MAX_SCALE_DOWN_AFTER_MS = 86_400_000;

/** The measures an autoscaler can hold a deployment to: its replicas scale to keep the measure near `value`. */
export const AutoscaleMetric = z.enum(['queueDepthPerReplica', 'inFlightPerReplica', 'ttftP95Ms']);
export type AutoscaleMetric = z.infer<typeof AutoscaleMetric>;

/** "is required" for an absent field, "must be a number" for anything else not a finite number. */
const numberIn = (what: string) => z.number({ error: (issue) => (issue.input === undefined ? `${what} is required` : `${what} must be a number`) });

const positive = (what: string, max: number) => numberIn(what).positive(`${what} must be above 0`).max(max, `${what} must be at most ${max}`);

/**
 * What to hold each replica to. The per-replica bounds are the deployment's own: a replica never queues more than
 * `queueCapacity` (100 000 at most) nor runs more than `maxConcurrency` (4096 at most) at once.
 */
const AutoscaleTarget = z.discriminatedUnion(
  'metric',
  [
    /** Invocations waiting on each ready replica, on average. */
    z.object({ metric: z.literal('queueDepthPerReplica'), value: positive('queueDepthPerReplica target', 100_000) }),
    /** Invocations running on each ready replica, on average. */
    z.object({ metric: z.literal('inFlightPerReplica'), value: positive('inFlightPerReplica target', 4096) }),
    /** The deployment's time to first token, 95th percentile, in ms. */
    z.object({ metric: z.literal('ttftP95Ms'), value: positive('ttftP95Ms target (ms)', MAX_TTFT_TARGET_MS) }),
  ],
  {
    error: (issue) =>
      issue.input === undefined ? 'target is required: { metric, value }' : `target's metric must be one of ${AutoscaleMetric.options.join(', ')}`,
  },
);

const wholeIn = (what: string, min: number, max: number) =>
  numberIn(what).int(`${what} must be a whole number`).min(min, `${what} must be at least ${min}`).max(max, `${what} must be at most ${max}`);

/**
 * Per-deployment autoscaling: the desired count moves between `minReplicas` and `maxReplicas` to hold `target`.
 * It scales up once the load has wanted more replicas for `scaleUpAfterMs`, down once it has wanted fewer for
 * `scaleDownAfterMs` (longer by default: starting a replica costs minutes of weights loading, keeping one a little
 * longer costs little). `minReplicas` 0 lets it scale to zero after `scaleDownAfterMs` without a request; a request
 * then wakes it. functions/core/autoscale/decide.ts holds the rules.
 */
export const AutoscaleSpec = z
  .object({
    minReplicas: wholeIn('minReplicas', 0, MAX_AUTOSCALE_REPLICAS),
    // 1 at least: a deployment that may never have a replica is paused, not autoscaled.
    maxReplicas: wholeIn('maxReplicas', 1, MAX_AUTOSCALE_REPLICAS),
    target: AutoscaleTarget,
    scaleUpAfterMs: wholeIn('scaleUpAfterMs', 0, MAX_SCALE_UP_AFTER_MS).default(30_000),
    scaleDownAfterMs: wholeIn('scaleDownAfterMs', 0, MAX_SCALE_DOWN_AFTER_MS).default(300_000),
  })
  .refine((spec) => spec.maxReplicas >= spec.minReplicas, { message: 'maxReplicas must be at least minReplicas', path: ['maxReplicas'] });
export type AutoscaleSpec = z.infer<typeof AutoscaleSpec>;

/** One decision of the autoscaler: the count it moved from and to (equal on a hold), why, and the measure behind it. */
export const AutoscalerDecision = z.object({
  /** When the controller decided (ISO 8601, the control plane's clock). */
  at: z.string(),
  action: z.enum(['up', 'down', 'hold']),
  from: z.number().int(),
  to: z.number().int(),
  /** Short and human: the deployment event's message when it moved. */
  reason: z.string(),
  /** The newest sample's measure: `value` null without one, `replicas` the serving replicas it was taken over. */
  observed: z.object({ metric: AutoscaleMetric, value: z.number().nullable(), target: z.number(), replicas: z.number().int() }),
});
export type AutoscalerDecision = z.infer<typeof AutoscalerDecision>;

/** A run of samples: the first of it and the newest (epoch ms). */
const Period = z.object({ since: z.number(), lastAt: z.number() });

/** What the autoscaler carries from one controller pass to the next (functions/core/autoscale/decide.ts). */
export const AutoscaleState = z.object({
  /** The count the periods were measured against: a different `current` ends them. */
  replicas: z.number().int(),
  /** The newest sample folded in: older ones in a later window are not folded again. */
  seenUntil: z.number().nullable(),
  /** Recommendations on one side of `replicas`, and the step they would take: lowest going up, highest going down. */
  trend: Period.extend({ direction: z.enum(['up', 'down']), bound: z.number().int() }).nullable(),
  /** No request and no work since `since`. */
  idle: Period.nullable(),
});
export type AutoscaleState = z.infer<typeof AutoscaleState>;

/** What a deployment's row keeps of its autoscaler: the state for the next pass and the latest decision. */
export const AutoscalerMemory = z.object({ state: AutoscaleState, last: AutoscalerDecision });
export type AutoscalerMemory = z.infer<typeof AutoscalerMemory>;
