import { z } from 'zod';

/**
 * Telemetry a node sends with its heartbeats (docs/telemetry.md): what its GPUs and its runtimes' engines do now.
 * Values come from the node, so each is bounded; one a part does not report is null, never a made-up 0.
 */
const Gauge = (max: number) => z.number().min(0).max(max).nullable();

/** One GPU as the agent sampled it (nvidia-smi's query mode, the inventory's own columns). */
export const GpuSample = z.object({
  index: z.number().int().min(0).max(63),
  utilizationPercent: Gauge(100),
  /** On a unified-memory part (GB10) the host's memory, as in the inventory. */
  memoryUsedMiB: Gauge(2 ** 31),
  memoryTotalMiB: Gauge(2 ** 31),
  temperatureC: z.number().min(-50).max(200).nullable(),
  powerDrawW: Gauge(100_000),
});
export type GpuSample = z.infer<typeof GpuSample>;

/** The most GPUs a heartbeat describes. */
export const MAX_GPU_SAMPLES = 16;

/**
 * A runtime's engine, read from its own metrics endpoint (its template's `metricsPath`) in vLLM's or llama.cpp's
 * Prometheus names (agent/telemetry/engine-metrics.ts). Counters are totals since the engine started.
 */
export const EngineSample = z.object({
  requestsRunning: Gauge(1_000_000),
  requestsWaiting: Gauge(1_000_000),
  /** KV-cache use, 0 to 1. */
  kvCacheUsage: Gauge(1),
  promptTokensTotal: Gauge(Number.MAX_SAFE_INTEGER),
  generationTokensTotal: Gauge(Number.MAX_SAFE_INTEGER),
});
export type EngineSample = z.infer<typeof EngineSample>;

/** How far back a history read goes (minutes), and how many points it answers at most. */
export const TelemetryQuery = z.object({
  minutes: z.coerce
    .number()
    .int()
    .min(1)
    .max(24 * 60 * 90)
    .default(60),
  points: z.coerce.number().int().min(2).max(720).default(120),
});
export type TelemetryQuery = z.infer<typeof TelemetryQuery>;

const Point = <T extends z.ZodRawShape>(shape: T) => z.object({ at: z.string(), ...shape });
const Mean = z.number().nullable();

/** A machine's GPUs over time: per GPU, the mean of each bucket's samples (null where it had none). */
export const MachineTelemetry = z.object({
  machineId: z.string(),
  from: z.string(),
  to: z.string(),
  stepMs: z.number().int(),
  gpus: z.array(
    z.object({
      index: z.number().int(),
      points: z.array(Point({ utilizationPercent: Mean, memoryUsedMiB: Mean, temperatureC: Mean, powerDrawW: Mean })),
    }),
  ),
});
export type MachineTelemetry = z.infer<typeof MachineTelemetry>;

/**
 * A deployment over time: its ready replicas, what waits and runs on them (summed over its machines), its engines'
 * KV-cache use (mean), and from its requests their TTFT p95, tokens per second and count.
 */
export const DeploymentTelemetry = z.object({
  deployment: z.string(),
  from: z.string(),
  to: z.string(),
  stepMs: z.number().int(),
  points: z.array(
    Point({
      replicas: Mean,
      queueDepth: Mean,
      inFlight: Mean,
      kvCacheUsage: Mean,
      ttftP95Ms: Mean,
      tokensPerSecond: Mean,
      requests: z.number().int(),
    }),
  ),
});
export type DeploymentTelemetry = z.infer<typeof DeploymentTelemetry>;
