import { z } from 'zod';
import { VersionArtifact } from './artifacts.js';
import { MAX_MACHINE_WORKERS } from './worker.js';

/** The simulated runtime's bounds, which the simulator checks again for its own flags. */
export const SIM_MAX_SEQUENCES = 4096;
export const SIM_MAX_TOKENS_PER_SECOND = 1_000_000;

/** The built-in simulated runtime (docs/design.md section 9): the agent's own `sim-runtime` subcommand. */
export const SimulatedRuntime = z.object({
  kind: z.literal('simulated'),
  model: z.string().min(1).max(200),
  ttftMs: z.number().nonnegative().max(600_000).default(20),
  /** 0 = as fast as it can (benchmarks). */
  tokensPerSecond: z.number().nonnegative().max(SIM_MAX_TOKENS_PER_SECOND).default(200),
  loadMs: z
    .number()
    .nonnegative()
    .max(24 * 3600_000)
    .default(200),
  memoryMiB: z
    .number()
    .nonnegative()
    .max(16 * 1024 * 1024)
    .default(1024),
  /** Fraction of requests that fail, for fault injection. */
  failureRate: z.number().min(0).max(1).default(0),
  /**
   * Sequences it generates at once; later requests wait in FIFO order, the wait counting in their time to first token.
   * Absent: no limit. No default, so that specs written before it hash as they did.
   */
  maxSequences: z.number().int().min(1).max(SIM_MAX_SEQUENCES).optional(),
  /**
   * A token rate the running sequences share evenly, each still at most `tokensPerSecond`: what makes a busy runtime
   * slower per request, as a GPU is. Absent: none, every sequence at its full rate.
   */
  sharedTokensPerSecond: z.number().positive().max(SIM_MAX_TOKENS_PER_SECOND).optional(),
});
export type SimulatedRuntime = z.infer<typeof SimulatedRuntime>;

/**
 * How the agent launches a runtime, as the control plane resolved it from a registered template: the
 * template's name, its pinned executable, the argv with the operator's parameters filled in (agent
 * placeholders such as `{port}` left for the agent), the environment the template allows, and the health path.
 * The agent's local policy decides whether it runs it at all.
 */
export const TemplateRuntime = z.object({
  kind: z.literal('template'),
  template: z.string().min(1).max(64),
  executable: z.string().min(2).max(4096),
  executableSha256: z.string().regex(/^[0-9a-f]{64}$/),
  args: z.array(z.string().max(4096)).max(256),
  env: z.record(z.string().regex(/^[A-Z][A-Z0-9_]{0,127}$/), z.string().max(4096)).default({}),
  healthPath: z.string().startsWith('/').max(200).default('/health'),
  /**
   * Where the agent reads the engine's metrics (docs/telemetry.md); absent: none. Absent rather than null, so that
   * the runtime of a template declaring none hashes as before (`templateHash`): an upgrade restarts no replica.
   */
  metricsPath: z.string().startsWith('/').max(200).optional(),
});
export type TemplateRuntime = z.infer<typeof TemplateRuntime>;

/** What a signed assignment runs. */
export const RuntimeSpec = z.discriminatedUnion('kind', [TemplateRuntime, SimulatedRuntime]);
export type RuntimeSpec = z.infer<typeof RuntimeSpec>;

export const RestartPolicy = z.object({
  mode: z.enum(['always', 'on-failure', 'never']).default('on-failure'),
  maxRestarts: z.number().int().nonnegative().default(5),
  backoffMs: z.number().int().nonnegative().default(1000),
});
export type RestartPolicy = z.infer<typeof RestartPolicy>;

export const ArtifactPin = z.object({
  uri: z.string().min(1).max(2048),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});
export type ArtifactPin = z.infer<typeof ArtifactPin>;

/**
 * How a replica starts and stays ready. Large models take many minutes to load: the default start timeout is
 * 30 minutes. Changing it applies to the running replicas in place (no restart).
 */
export const StartupSpec = z.object({
  /** A replica not ready by then counts as failed (and is restarted by its restart policy). */
  timeoutMs: z
    .number()
    .int()
    .min(1_000)
    .max(24 * 3600_000)
    .default(30 * 60_000),
  /** How often the readiness probe runs, while starting and while ready. */
  probeIntervalMs: z.number().int().min(100).max(60_000).default(1_000),
  /** Consecutive failed probes of a ready runtime before it counts as failed. */
  failureThreshold: z.number().int().min(1).max(100).default(3),
});
export type StartupSpec = z.infer<typeof StartupSpec>;

/** One runtime the machine must run, as the control plane signed it. */
export const Assignment = z.object({
  assignmentId: z.string(),
  deploymentId: z.string(),
  deploymentName: z.string(),
  model: z.string(),
  deploymentGeneration: z.number().int().nonnegative(),
  runtime: RuntimeSpec,
  artifact: ArtifactPin.nullable(),
  restartPolicy: RestartPolicy,
  resources: z.object({
    gpus: z.number().int().nonnegative(),
    memoryMiB: z.number().nonnegative(),
    /** Memory each of its GPUs must have; absent: any. */
    gpuMemoryMiB: z.number().int().nonnegative().optional(),
  }),
  /** Which of its deployment's replica sets it belongs to (docs/registry.md); absent: the stable version's. */
  track: z.enum(['stable', 'canary']).optional(),
  /**
   * The registry version whose files the agent fetches into its cache and checks before start; its folder is the
   * runtime's `{model_path}`. Absent for a deployment that names no registry version.
   */
  version: VersionArtifact.optional(),
  startup: StartupSpec.default(StartupSpec.parse({})),
  /**
   * Digest of what makes the replica what it is (model, runtime, artifact, resources): the agent replaces a
   * running replica only when this changes, never for a generation bump alone.
   */
  templateHash: z.string().max(128),
});
export type Assignment = z.infer<typeof Assignment>;

/** One worker process of a run the machine must run (shared/contracts/worker.ts: the workers' wire contract). */
export const WorkerAssignment = z.object({
  workerId: z.string().min(1).max(64),
  runId: z.string().min(1).max(64),
  /** `<run>-<rank>`, or `<run>-<group>-<rank>` with groups. */
  name: z.string().min(1).max(128),
  /** Bumped by each restart: a new attempt is a new process, and the agent stops the old one first. */
  attempt: z.number().int().nonnegative().max(1_000_000),
  /**
   * The process, resolved by the control plane from a registered runtime template as for a replica (its `env`
   * carries RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT); the node's local policy decides whether it
   * runs it, with the same pins as a runtime's. The agent adds CUDA_VISIBLE_DEVICES from the GPUs it gives it.
   */
  command: TemplateRuntime,
  resources: z.object({
    gpus: z.number().int().nonnegative().max(64),
    cores: z.number().int().nonnegative().max(1024),
    memoryMiB: z.number().int().nonnegative(),
  }),
  /**
   * `prepare`: get everything ready (policy checked, files present, user and home made) and report
   * `ready-to-start` without starting the process (a gang waits for all its workers); `start`: start it.
   */
  phase: z.enum(['prepare', 'start']),
  /**
   * The job whose runner this worker is (docs/jobs.md, the `agent` backend): when it starts, the agent asks for the
   * runner's token for this worker's attempt and gives the process the job's variables (LUNANEXA_URL, LUNANEXA_JOB_ID,
   * LUNANEXA_JOB_TOKEN, ENDPOINT, MODEL, OPENAI_BASE_URL, OPENAI_API_KEY). The token never travels in the desired state.
   */
  job: z.object({ id: z.string().min(1).max(64) }).optional(),
});
export type WorkerAssignment = z.infer<typeof WorkerAssignment>;

/** The claims of the signed desired-state JWS sent on the stream (docs/design.md section 4). */
export const DesiredState = z.object({
  sub: z.string(),
  gen: z.number().int().nonnegative(),
  iat: z.number().int(),
  exp: z.number().int(),
  assignments: z.array(Assignment),
  /** A run's workers this machine runs (shared/contracts/worker.ts); absent from a plane without runs. */
  workers: z.array(WorkerAssignment).max(MAX_MACHINE_WORKERS).default([]),
});
export type DesiredState = z.infer<typeof DesiredState>;
