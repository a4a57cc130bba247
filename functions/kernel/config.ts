import { z } from 'zod';

/** S3 key characters that need no escaping, `/`-separated: `models`, `team-a/models`. */
const S3_PREFIX = /^[A-Za-z0-9!_.*'()-]+(\/[A-Za-z0-9!_.*'()-]+)*$/;

/**
 * An S3-compatible bucket as the artifact store (docs/artifacts.md). The credentials are never logged; without
 * them the SDK's own chain applies (AWS_* variables, an instance or task role).
 */
export const ArtifactsS3Config = z
  .object({
    bucket: z.string().regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'an S3 bucket name: 3-63 lowercase letters, digits, dots and dashes'),
    /** Another endpoint than AWS's (MinIO, Ceph, R2, a test server). */
    endpoint: z.string().url().optional(),
    region: z
      .string()
      .regex(/^[a-z0-9-]{1,64}$/, 'a region such as us-east-1')
      .default('us-east-1'),
    /** Versions live under `<prefix>/` in the bucket; unset: at its root. */
    prefix: z.string().max(512).regex(S3_PREFIX, "a key prefix such as models or team-a/models, without a leading or trailing '/'").optional(),
    /** `<endpoint>/<bucket>/<key>` rather than `<bucket>.<endpoint>/<key>`: most self-hosted servers want it. */
    forcePathStyle: z.boolean().default(false),
    accessKeyId: z.string().min(1).max(256).optional(),
    secretAccessKey: z.string().min(1).max(256).optional(),
  })
  .refine((s3) => (s3.accessKeyId === undefined) === (s3.secretAccessKey === undefined), 'set both the access key id and the secret access key, or neither');
export type ArtifactsS3Config = z.infer<typeof ArtifactsS3Config>;

/** A Slurm option's value: no whitespace, no control character (each is one argument of `sbatch`). */
const SLURM_WORD = /^[^\s\x00-\x1f\x7f]+$/;

/**
 * The `slurm` backend of jobs (docs/jobs.md, "Slurm"): each runner is a batch job of the site's Slurm, submitted
 * with its client commands from the control plane's host. Unset: no Slurm.
 */
export const JobsSlurmConfig = z.object({
  /** Runners one instance holds in Slurm at once (queued or running): Slurm queues them, so this bounds one's share. */
  runners: z.number().int().min(1).max(10_000).default(8),
  /** Unset: the cluster's default partition and the user's default account. */
  partition: z.string().max(256).regex(SLURM_WORD, 'a Slurm partition name').optional(),
  account: z.string().max(256).regex(SLURM_WORD, 'a Slurm account name').optional(),
  /** Per runner: the runner is one Node process sending rows over HTTP; a Parquet job holds its input file whole. */
  cpus: z.number().int().min(1).max(1_024).default(1),
  memoryMiB: z
    .number()
    .int()
    .min(64)
    .max(16 * 1024 * 1024)
    .default(2_048),
  /** More `sbatch` options, each one argument (`--time=04:00:00`, `--qos=batch`): the site's own rules. */
  extraArgs: z.array(z.string().max(1_024).regex(SLURM_WORD, 'one sbatch argument, without whitespace')).max(64).default([]),
  /**
   * Where each runner's output goes (`lunanexa-<job>-<attempt>-<slurm id>.log`) and where it runs: a directory the
   * compute nodes can write, at the same path (a shared file system).
   */
  logDir: z
    .string()
    .min(1)
    .max(1_024)
    .regex(/^\/[^\x00-\x1f\x7f%]*$/, "an absolute path, without '%' (Slurm's file name patterns)"),
  /** The slurm.conf the client commands read (their SLURM_CONF); unset: theirs by default (/etc/slurm/slurm.conf). */
  conf: z.string().min(1).max(1_024).optional(),
  /**
   * The runner's program and its arguments, as the compute node runs it; unset: this control plane's Node and its
   * bin/lunanexa-runner.mjs, which must then be at the same paths on the nodes.
   */
  command: z
    .array(
      z
        .string()
        .min(1)
        .max(4_096)
        .regex(/^[^\x00]*$/),
    )
    .min(1)
    .max(64)
    .optional(),
});
export type JobsSlurmConfig = z.infer<typeof JobsSlurmConfig>;

/**
 * Timing and limits of the control plane. Defaults are docs/design.md section 4; tests shorten the intervals.
 * Every duration is in milliseconds.
 */
export const ControlPlaneConfig = z
  .object({
    /** How often an agent sends a keep-alive heartbeat (at most every 20 s by the protocol). */
    heartbeatIntervalMs: z.number().int().positive().max(20_000).default(20_000),
    /** A machine heartbeat lives this long; past it the machine and its runtimes are `down`. */
    machineLifetimeMs: z.number().int().positive().default(60_000),
    /** Runtime heartbeat TTL. */
    runtimeTtlMs: z.number().int().positive().default(60_000),
    /** Grace a running runtime (and a machine that missed one keep-alive) gets before it is `stale`. */
    runtimeGraceMs: z.number().int().nonnegative().default(15_000),
    /** SSE comment keep-alive on the agent stream (at most 15 s by the protocol); the stream lease renews with it. */
    streamKeepAliveMs: z.number().int().positive().max(15_000).default(15_000),
    /** A stream lease outlives its last renewal by this much, so a dead instance's lease lapses on its own. */
    streamLeaseTtlMs: z.number().int().positive().default(45_000),
    /**
     * An instance's own lease (renewed at a third of this): when an instance dies, the streams it held and the
     * workloads it ran count as gone once this lapses, not when their own longer leases do.
     */
    instanceLeaseTtlMs: z.number().int().min(1_000).default(6_000),
    /**
     * The stream carries a ping this often; the agent answers it. A machine whose agent has not answered for
     * `streamPingTimeoutMs` is unroutable at once (a frozen agent keeps its TCP stream and its lease open).
     */
    streamPingMs: z.number().int().positive().default(3_000),
    streamPingTimeoutMs: z.number().int().positive().default(8_000),
    /** Lifetime of a signed desired state; the stream re-signs it at a third of this before expiry. */
    desiredTtlMs: z
      .number()
      .int()
      .positive()
      .default(10 * 60_000),
    /**
     * Clock skew tolerated between an agent and the database, both ways: a machine token issued up to this far in
     * the future, or expired up to this long ago, is accepted. Agents correct their clock by the offset they
     * measure, so this only absorbs what the measurement misses.
     */
    clockSkewToleranceMs: z.number().int().nonnegative().max(60_000).default(5_000),
    /** Lifetime of a machine credential; agents rotate at two thirds of it. */
    credentialLifetimeMs: z
      .number()
      .int()
      .positive()
      .default(30 * 24 * 3600_000),
    /** How often the controller reconciles and sweeps expired rows. */
    reconcileIntervalMs: z.number().int().positive().default(5_000),
    /**
     * Lost replicas (on `down` machines) are not replaced while at least 2 of a workspace's machines are silent and
     * they are more than this fraction of its enrolled machines: so many at once is likely a partition, not failures
     * (docs/scheduler.md).
     */
    replacementPauseFraction: z.number().min(0).max(1).default(0.5),
    /** Largest request body an agent endpoint accepts. */
    agentMaxBodyBytes: z
      .number()
      .int()
      .positive()
      .default(256 * 1024),
    /** Largest request body a management endpoint accepts. */
    apiMaxBodyBytes: z
      .number()
      .int()
      .positive()
      .default(64 * 1024),
    /** Largest registration of a model version: its manifest lists up to 10,000 files (docs/registry.md). */
    manifestMaxBodyBytes: z
      .number()
      .int()
      .positive()
      .default(8 * 1024 * 1024),
    /** Largest inference request body (`/v1`). */
    inferenceMaxBodyBytes: z
      .number()
      .int()
      .positive()
      .default(4 * 1024 * 1024),
    /**
     * Largest file of the Files API (`POST /v1/files`; LUNANEXA_FILES_MAX_BYTES): 200 MiB by default, OpenAI's bound
     * on a batch's input. The upload is streamed to the artifact store, never held whole, so this bounds the store's
     * use, not memory.
     */
    filesMaxBytes: z
      .number()
      .int()
      .positive()
      .default(200 * 1024 * 1024),
    /** Largest frames upload of one invocation. */
    framesMaxBytes: z
      .number()
      .int()
      .positive()
      .default(256 * 1024 * 1024),
    /**
     * How often each instance refreshes its routing snapshot from the store (changes the instance sees itself
     * refresh it at once); each refresh is a handful of queries, whatever the request rate.
     */
    routingRefreshMs: z.number().int().positive().default(1_000),
    /**
     * A node that has not acknowledged an `invoke` (its `accept` frame) by then is given up on: the call is cancelled
     * there and retried elsewhere. Short, so that requests already sent to a frozen node move on quickly; with some
     * room, because an agent on the per-invocation fallback acknowledges with a signed request of its own.
     */
    invokeAckTimeoutMs: z.number().int().positive().default(5_000),
    /**
     * The share of a deployment's queue (`queueCapacity`: queued + running invocations, per instance) that one API
     * token may hold at once, at least 1 (LUNANEXA_ADMISSION_TOKEN_SHARE): past it the token's next request gets 429
     * `token_concurrency_exceeded` with `Retry-After`, while other tokens still get in. 1 lets one token fill it.
     */
    admissionTokenShare: z.number().gt(0).max(1).default(0.5),
    /**
     * Node, the API's listener and the peer channel's: a request whose headers have not all arrived this long after
     * its first byte is answered 408 and its connection closed (LUNANEXA_HEADERS_TIMEOUT_MS), checked every second; a
     * trickled header holds a connection no longer. Bodies and answers are not timed by it: SSE streams, uplinks and uploads are long-lived.
     */
    headersTimeoutMs: z.number().int().min(100).max(300_000).default(10_000),
    /**
     * Node: connections each listener (the API's, the peer channel's) holds at once (LUNANEXA_MAX_CONNECTIONS); one
     * more is closed as it arrives.
     * Each agent holds two (its stream and its uplink) and each live console or streamed answer one; keep it under
     * the process's open-files limit. 0: no cap.
     */
    maxConnections: z.number().int().min(0).max(1_000_000).default(10_000),
    /** Attempts of one inference request across replicas, while no byte has reached the client. */
    maxAttempts: z.number().int().min(1).max(10).default(3),
    /**
     * Workload records and replay-fence entries are written in batches this often (group commit): a crash loses
     * at most this much of their history, and another instance sees a workload this much later. 0 writes each
     * at once (Workers).
     */
    writeBehindMs: z.number().int().nonnegative().max(1_000).default(25),
    /** Deadline of an inference request that names none. */
    defaultDeadlineMs: z
      .number()
      .int()
      .positive()
      .default(10 * 60_000),
    /**
     * The furthest deadline an inference request gets: one further ahead is clamped to it, one more than a day
     * past it is refused (docs/security.md, bounds). Under 2^31 ms, so that every timer holds it.
     */
    maxDeadlineMs: z
      .number()
      .int()
      .positive()
      .max(2 ** 31 - 1)
      .default(3_600_000),
    /** Largest single frame of an uplink or frames upload; a larger one is refused from its length field, unread. */
    frameMaxBytes: z
      .number()
      .int()
      .positive()
      .default(1024 * 1024),
    /**
     * Bytes of one streamed answer this instance holds for a client that reads slower than the runtime writes
     * (docs/relay.md, "Memory"): past them the client is cut with `client_too_slow` and the runtime call cancelled.
     */
    relayBufferMaxBytes: z
      .number()
      .int()
      .positive()
      .default(8 * 1024 * 1024),
    /**
     * Flow control (docs/relay.md, "Memory"): data bytes of one streamed answer a node sends ahead of what its client
     * has taken. At it the node stops reading its runtime until the client reads on.
     */
    relayWindowBytes: z
      .number()
      .int()
      .min(64 * 1024)
      .default(1024 * 1024),
    /** A streamed answer's client that takes nothing for this long while the answer waits is cut: `client_too_slow`. */
    relayClientStallMs: z.number().int().positive().default(60_000),
    /** The run queue's fair share counts each workspace's GPU-seconds over this window (docs/runs.md): a day. */
    runFairShareWindowMs: z.number().int().positive().default(86_400_000),
    /** Job runners the `local` backend runs at once on one instance (docs/jobs.md, "Backends"). */
    jobsLocalRunners: z.number().int().min(0).max(256).default(4),
    /**
     * The `agent` backend (docs/jobs.md, "Backends"): each runner a one-worker run of `template` (a registered job
     * template the nodes' local policy allows) reserving `cores` and `memoryMiB`; at most `runners` held by one
     * instance at once.
     */
    jobsAgent: z
      .object({
        runners: z.number().int().min(0).max(4096).default(16),
        template: z.string().min(1).max(64).default('lunanexa-runner'),
        cores: z.number().int().min(0).max(1024).default(1),
        memoryMiB: z.number().int().min(0).default(512),
      })
      .default({ runners: 16, template: 'lunanexa-runner', cores: 1, memoryMiB: 512 }),
    /** How long an instance holds a job whose runner it runs without renewing: past it, the runner counts as lost. */
    jobsLeaseMs: z.number().int().positive().default(30_000),
    /** How often the `local` backend looks for jobs to start, expire, recover and finalize. */
    jobsTickMs: z.number().int().positive().default(1_000),
    /** The `slurm` backend (LUNANEXA_JOBS_SLURM_*, docs/jobs.md "Slurm"): null, none. */
    jobsSlurm: JobsSlurmConfig.nullable().default(null),
    /** Largest answer that is not streamed (it is held whole, then sent): past it, 502 `answer_too_large`. */
    plainAnswerMaxBytes: z
      .number()
      .int()
      .positive()
      .default(64 * 1024 * 1024),
    /** Every answer's bytes this instance holds at once, summed: the invocation that would pass it is cut. */
    relayBuffersMaxBytes: z
      .number()
      .int()
      .positive()
      .default(512 * 1024 * 1024),
    /**
     * Serve the whole of /metrics without a token (`npm start` does). Otherwise an API token of role viewer or above
     * scrapes its own workspace's series, and the whole set is for an admin of the default workspace or `metricsToken`.
     */
    metricsPublic: z.boolean().default(false),
    /**
     * The installation's scrape credential (LUNANEXA_METRICS_TOKEN): `Authorization: Bearer <it>` scrapes the whole of
     * /metrics, every workspace's series and the installation's, and nothing else. At least 32 characters; never logged.
     */
    metricsToken: z.string().min(32).max(512).regex(/^\S+$/, 'no whitespace').optional(),
    /**
     * Management requests (`/api/v1`, `/metrics`) an API token may make per minute, across every instance
     * (LUNANEXA_MANAGEMENT_RATE_LIMIT_PER_MINUTE); an inference token's own lower `rateLimitPerMinute` applies instead.
     * Past it: 429 `rate_limit_exceeded` with `Retry-After`. 0 counts nothing.
     */
    managementRateLimitPerMinute: z.number().int().min(0).max(1_000_000).default(3_000),
    /**
     * Console sign-in attempts (`POST /console/sign-in`) a client address may make per minute, across every instance
     * (LUNANEXA_CONSOLE_SIGN_IN_PER_MINUTE). Past it: the sign-in page with 429 and `Retry-After`. 0 counts nothing.
     */
    consoleSignInPerMinute: z.number().int().min(0).max(100_000).default(10),
    /**
     * How long workload rows (one per inference request: its state, idempotency key and usage) are kept, in days
     * (LUNANEXA_WORKLOAD_RETENTION_DAYS): the controller tick deletes finished ones older than that, in bounded
     * batches. Usage reports cover only this window, and an Idempotency-Key can be reused past it.
     */
    workloadRetentionDays: z.number().int().min(1).max(3_660).default(30),
    /**
     * How often a machine's telemetry (its GPUs, its runtimes' queues and engines) is kept as a sample of its history,
     * in ms (LUNANEXA_TELEMETRY_SAMPLE_MS): at most one row per machine per interval, from its heartbeats
     * (docs/telemetry.md). A fleet of thousands keeps fewer rows by a longer interval.
     */
    telemetrySampleMs: z.number().int().min(1_000).max(3_600_000).default(10_000),
    /** How long telemetry samples are kept, in hours (LUNANEXA_TELEMETRY_RETENTION_HOURS): the controller tick deletes older ones. */
    telemetryRetentionHours: z
      .number()
      .int()
      .min(1)
      .max(24 * 90)
      .default(24),
    /**
     * The local artifact store (docs/registry.md): a version's files under `<dir>/<workspace id>/<model>/<version>/`.
     * On Node `<data dir>/artifacts` unless LUNANEXA_ARTIFACTS_DIR says otherwise; Workers have none.
     */
    artifactsDir: z.string().min(1).optional(),
    /** When set, the artifact store is this bucket instead of the local directory (LUNANEXA_ARTIFACTS_S3_*). */
    artifactsS3: ArtifactsS3Config.optional(),
    /**
     * How long the artifact URLs of a signed desired state work (LUNANEXA_ARTIFACT_URL_TTL_MS). Longer than
     * `desiredTtlMs`, so that an agent never holds an unexpired state whose URLs are dead; at most the 7 days of a
     * SigV4 presigned URL.
     */
    artifactUrlTtlMs: z
      .number()
      .int()
      .min(60_000)
      .max(7 * 24 * 3600_000)
      .default(3_600_000),
    /**
     * The control plane's URL as agents reach it (LUNANEXA_PUBLIC_URL): the base of the local store's file URLs.
     * On Node unset: the URL it listens on, which is right for `npm start`'s agents on the same host.
     */
    publicUrl: z.string().url().optional(),
    /**
     * AES-256-GCM key of runtime secrets, base64 of 32 bytes (LUNANEXA_SECRET_KEY; on Node, else
     * `<data dir>/secret.key`). Without it runtime secrets can be neither written nor delivered. Never logged.
     */
    secretKey: z
      .string()
      .regex(/^[A-Za-z0-9+/]{43}=$/, 'base64 of 32 bytes (openssl rand -base64 32)')
      .optional(),
  })
  .refine((config) => config.artifactUrlTtlMs > config.desiredTtlMs, {
    message: 'the artifact URL TTL must exceed the desired-state TTL (desiredTtlMs)',
    path: ['artifactUrlTtlMs'],
  });
export type ControlPlaneConfig = z.infer<typeof ControlPlaneConfig>;

/** A machine is `stale` once it missed a keep-alive and its grace: interval + grace. */
export function machineStaleAfterMs(config: Pick<ControlPlaneConfig, 'heartbeatIntervalMs' | 'runtimeGraceMs'>): number {
  return config.heartbeatIntervalMs + config.runtimeGraceMs;
}
