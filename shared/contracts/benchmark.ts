import { z } from 'zod';
import { GpuSample } from './telemetry.js';
import { VersionView } from './registry.js';

/** The format of stored benchmark evidence; a reader that meets a newer one knows it cannot judge it. */
/** 2: each machine's GPUs as its node reported them during the gate (`hardware[].reported`), beside its inventory. */
export const BENCHMARK_EVIDENCE_VERSION = 2;

/**
 * A named workload profile: what the gate sends to the canary (through the same `/v1` path as any client) and
 * the thresholds its measurements must meet.
 */
export const WorkloadProfile = z.object({
  name: z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'a profile name: lowercase letters, digits, . _ -, 1-63 characters'),
  requests: z.number().int().min(1).max(10_000).default(20),
  concurrency: z.number().int().min(1).max(256).default(4),
  /** Prompt sent with each request, and how many tokens each may produce. */
  prompt: z.string().min(1).max(8_192).default('Summarise the history of the printing press in three sentences.'),
  maxTokens: z.number().int().min(1).max(4_096).default(64),
  thresholds: z
    .object({
      ttftP95Ms: z.number().positive().optional(),
      tokensPerSecondMin: z.number().positive().optional(),
      errorRateMax: z.number().min(0).max(1).default(0),
    })
    .default({ errorRateMax: 0 }),
});
export type WorkloadProfile = z.infer<typeof WorkloadProfile>;

const Percentiles = z.object({ p50: z.number(), p95: z.number(), p99: z.number() });

/** What one gate run measured, with what it ran on: stored as is, versioned. */
export const BenchmarkEvidence = z.object({
  evidenceVersion: z.number().int(),
  model: z.string(),
  version: z.string(),
  versionId: z.string(),
  deployment: z.string(),
  runtime: z.unknown(),
  /**
   * Each machine the canary ran on: its name, its inventory (what it is: GPU models, driver, memory), and what its
   * node reported of its GPUs during the gate (docs/telemetry.md): the samples kept from its heartbeats between the
   * gate's start and end, and the last one it sent when the gate ended. Evidence version 1 has no `reported`.
   */
  hardware: z.array(
    z.object({
      machine: z.string(),
      inventory: z.unknown(),
      reported: z.array(z.object({ at: z.string(), gpus: z.array(GpuSample) })).optional(),
    }),
  ),
  profile: WorkloadProfile,
  requests: z.number().int(),
  errors: z.number().int(),
  ttftMs: Percentiles,
  interTokenMs: Percentiles,
  latencyMs: Percentiles,
  /** Completion tokens per second of each request's generation phase, median across requests; and in total. */
  tokensPerSecond: z.object({ perRequestP50: z.number(), aggregate: z.number() }),
  durationMs: z.number(),
  /** Why it failed, one line per threshold missed or precondition unmet; empty when it passed. */
  failures: z.array(z.string()),
  startedAt: z.string(),
});
export type BenchmarkEvidence = z.infer<typeof BenchmarkEvidence>;

export const BenchmarkRunView = z.object({
  id: z.string(),
  profile: z.string(),
  passed: z.boolean(),
  evidence: BenchmarkEvidence,
  createdBy: z.string(),
  createdAt: z.string(),
});
export type BenchmarkRunView = z.infer<typeof BenchmarkRunView>;

export const GateResult = z.object({ run: BenchmarkRunView, version: VersionView });
export type GateResult = z.infer<typeof GateResult>;
