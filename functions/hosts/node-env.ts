import { z } from 'zod';
import { ControlPlaneConfig } from '../kernel/config.js';

const ms = z.coerce.number().int().positive().optional();

/** The Node control plane's environment, parsed once at start (docs/design.md section 10). */
export const NodeEnv = z.object({
  /** Port of the HTTP server. */
  LUNANEXA_PORT: z.coerce.number().int().min(0).max(65535).default(8787),
  /** Interface to bind; loopback unless an operator opens it up deliberately. */
  LUNANEXA_HOST: z.string().default('127.0.0.1'),
  /**
   * The peer channel: its own listener, where the other instances forward invocations for the machines whose
   * links this one holds. Loopback and a free port by default (one host); on several hosts, bind an interface the
   * others reach and advertise its URL. Never the public port, and answered only to peer tokens of the cluster.
   */
  LUNANEXA_PEER_HOST: z.string().default('127.0.0.1'),
  LUNANEXA_PEER_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  LUNANEXA_PEER_URL: z.string().url().optional(),
  /**
   * TLS on the peer channel: the listener's certificate and key (PEM files; both or neither), which then serves
   * HTTPS and advertises an https URL, and the CA certificates (a PEM file) the other instances' certificates are
   * checked against (unset: the system's). The certificate must name the host of the advertised URL.
   */
  LUNANEXA_PEER_TLS_CERT: z.string().min(1).optional(),
  LUNANEXA_PEER_TLS_KEY: z.string().min(1).optional(),
  LUNANEXA_PEER_TLS_CA: z.string().min(1).optional(),
  /** Embedded store, admin token and simulator state live here. */
  LUNANEXA_DATA_DIR: z.string().default('.lunanexa'),
  /** When set, the store is this PostgreSQL instead of the embedded one. */
  DATABASE_URL: z.string().url().optional(),
  /**
   * The same database as the role that owns its tables: migrations are applied through it (at start, and by
   * `npm run db:migrate`), and DATABASE_URL's role is granted only what the control plane does, the audit log
   * append-only. Unset: DATABASE_URL's role migrates and owns the tables, and could switch the audit log's
   * append-only trigger off (docs/operations.md, "Database roles").
   */
  LUNANEXA_DATABASE_OWNER_URL: z.string().url().optional(),
  /**
   * Key of runtime secrets, base64 of 32 bytes. Unset on Node: `<data dir>/secret.key`, generated on first
   * start. Instances sharing one database need the same key.
   */
  LUNANEXA_SECRET_KEY: ControlPlaneConfig.shape.secretKey,
  /** The local artifact store; unset: `<data dir>/artifacts`. */
  LUNANEXA_ARTIFACTS_DIR: ControlPlaneConfig.shape.artifactsDir,
  /**
   * The artifact store as an S3-compatible bucket instead (docs/artifacts.md): the bucket, and where and how to
   * reach it. The secret access key is never logged; without the key pair the AWS SDK's own chain applies.
   */
  LUNANEXA_ARTIFACTS_S3_BUCKET: z.string().optional(),
  LUNANEXA_ARTIFACTS_S3_ENDPOINT: z.string().optional(),
  LUNANEXA_ARTIFACTS_S3_REGION: z.string().optional(),
  LUNANEXA_ARTIFACTS_S3_PREFIX: z.string().optional(),
  LUNANEXA_ARTIFACTS_S3_FORCE_PATH_STYLE: z.stringbool().optional(),
  LUNANEXA_ARTIFACTS_S3_ACCESS_KEY_ID: z.string().optional(),
  LUNANEXA_ARTIFACTS_S3_SECRET_ACCESS_KEY: z.string().optional(),
  /** Largest file of the Files API, in bytes (default 200 MiB). */
  LUNANEXA_FILES_MAX_BYTES: z.coerce.number().int().positive().optional(),
  /** How long the artifact URLs of a signed desired state work (default an hour). */
  LUNANEXA_ARTIFACT_URL_TTL_MS: ms,
  /** The control plane's URL as agents reach it, when not the one it listens on (a proxy, a bind to 0.0.0.0). */
  LUNANEXA_PUBLIC_URL: ControlPlaneConfig.shape.publicUrl,
  /** The installation's scrape credential for /metrics (docs/operations.md, "Metrics"); unset: none. */
  LUNANEXA_METRICS_TOKEN: ControlPlaneConfig.shape.metricsToken,
  /** Management requests per token and minute (default 3,000; 0 counts nothing). */
  LUNANEXA_MANAGEMENT_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(0).optional(),
  /** Console sign-in attempts per client address and minute (default 10; 0 counts nothing). */
  LUNANEXA_CONSOLE_SIGN_IN_PER_MINUTE: z.coerce.number().int().min(0).optional(),
  /** Days workload rows (inference requests, usage) are kept (default 30). */
  LUNANEXA_WORKLOAD_RETENTION_DAYS: z.coerce.number().int().min(1).optional(),
  /** How often a machine's telemetry is kept as a sample (default 10 s), and how many hours samples are kept (default 24). */
  LUNANEXA_TELEMETRY_SAMPLE_MS: ms,
  LUNANEXA_TELEMETRY_RETENTION_HOURS: z.coerce.number().int().min(1).optional(),
  /** See `admissionTokenShare` in functions/kernel/config.ts: one token's share of a deployment's queue (default 0.5). */
  LUNANEXA_ADMISSION_TOKEN_SHARE: z.coerce.number().gt(0).max(1).optional(),
  /** See `headersTimeoutMs` and `maxConnections` in functions/kernel/config.ts (the Node server's connection bounds). */
  LUNANEXA_HEADERS_TIMEOUT_MS: ms,
  LUNANEXA_MAX_CONNECTIONS: z.coerce.number().int().min(0).optional(),
  /** Simulated nodes `npm start` launches (0 = none). */
  LUNANEXA_SIM_NODES: z.coerce.number().int().min(0).max(64).default(4),
  /** Overrides of the protocol's timings, for demos and tests. */
  LUNANEXA_HEARTBEAT_INTERVAL_MS: ms,
  LUNANEXA_MACHINE_LIFETIME_MS: ms,
  LUNANEXA_RUNTIME_TTL_MS: ms,
  LUNANEXA_RUNTIME_GRACE_MS: ms,
  LUNANEXA_STREAM_KEEPALIVE_MS: ms,
  LUNANEXA_RECONCILE_INTERVAL_MS: ms,
  LUNANEXA_INSTANCE_LEASE_TTL_MS: ms,
  LUNANEXA_STREAM_PING_MS: ms,
  LUNANEXA_STREAM_PING_TIMEOUT_MS: ms,
  LUNANEXA_INVOKE_ACK_TIMEOUT_MS: ms,
  /** See `replacementPauseFraction` in functions/kernel/config.ts. */
  LUNANEXA_REPLACEMENT_PAUSE_FRACTION: z.coerce.number().min(0).max(1).optional(),
  /** See `relayBufferMaxBytes`, `plainAnswerMaxBytes` and `relayBuffersMaxBytes` in functions/kernel/config.ts. */
  LUNANEXA_RELAY_BUFFER_MAX_BYTES: z.coerce.number().int().positive().optional(),
  LUNANEXA_PLAIN_ANSWER_MAX_BYTES: z.coerce.number().int().positive().optional(),
  LUNANEXA_RELAY_BUFFERS_MAX_BYTES: z.coerce.number().int().positive().optional(),
  /** See `relayWindowBytes` and `relayClientStallMs` in functions/kernel/config.ts. */
  LUNANEXA_RELAY_WINDOW_BYTES: z.coerce.number().int().positive().optional(),
  LUNANEXA_RELAY_CLIENT_STALL_MS: z.coerce.number().int().positive().optional(),
  LUNANEXA_RUN_FAIR_SHARE_WINDOW_MS: z.coerce.number().int().positive().optional(),
  LUNANEXA_JOBS_LOCAL_RUNNERS: z.coerce.number().int().min(0).optional(),
  /**
   * The `slurm` backend of jobs (docs/jobs.md, "Slurm"), on when any of these is set; the log directory is then
   * required. `_ARGS` (more sbatch options) and `_COMMAND` (the runner's program) are split at whitespace.
   */
  LUNANEXA_JOBS_SLURM_LOG_DIR: z.string().optional(),
  LUNANEXA_JOBS_SLURM_RUNNERS: z.coerce.number().int().optional(),
  LUNANEXA_JOBS_SLURM_PARTITION: z.string().optional(),
  LUNANEXA_JOBS_SLURM_ACCOUNT: z.string().optional(),
  LUNANEXA_JOBS_SLURM_CPUS: z.coerce.number().int().optional(),
  LUNANEXA_JOBS_SLURM_MEMORY_MIB: z.coerce.number().int().optional(),
  LUNANEXA_JOBS_SLURM_ARGS: z.string().optional(),
  LUNANEXA_JOBS_SLURM_CONF: z.string().optional(),
  LUNANEXA_JOBS_SLURM_COMMAND: z.string().optional(),
});
export type NodeEnv = z.infer<typeof NodeEnv>;

/** The control-plane configuration the environment asks for. */
export function configFromEnv(env: NodeEnv): ControlPlaneConfig {
  return ControlPlaneConfig.parse({
    heartbeatIntervalMs: env.LUNANEXA_HEARTBEAT_INTERVAL_MS,
    machineLifetimeMs: env.LUNANEXA_MACHINE_LIFETIME_MS,
    runtimeTtlMs: env.LUNANEXA_RUNTIME_TTL_MS,
    runtimeGraceMs: env.LUNANEXA_RUNTIME_GRACE_MS,
    streamKeepAliveMs: env.LUNANEXA_STREAM_KEEPALIVE_MS,
    reconcileIntervalMs: env.LUNANEXA_RECONCILE_INTERVAL_MS,
    instanceLeaseTtlMs: env.LUNANEXA_INSTANCE_LEASE_TTL_MS,
    streamPingMs: env.LUNANEXA_STREAM_PING_MS,
    streamPingTimeoutMs: env.LUNANEXA_STREAM_PING_TIMEOUT_MS,
    invokeAckTimeoutMs: env.LUNANEXA_INVOKE_ACK_TIMEOUT_MS,
    replacementPauseFraction: env.LUNANEXA_REPLACEMENT_PAUSE_FRACTION,
    relayBufferMaxBytes: env.LUNANEXA_RELAY_BUFFER_MAX_BYTES,
    plainAnswerMaxBytes: env.LUNANEXA_PLAIN_ANSWER_MAX_BYTES,
    relayBuffersMaxBytes: env.LUNANEXA_RELAY_BUFFERS_MAX_BYTES,
    relayWindowBytes: env.LUNANEXA_RELAY_WINDOW_BYTES,
    relayClientStallMs: env.LUNANEXA_RELAY_CLIENT_STALL_MS,
    runFairShareWindowMs: env.LUNANEXA_RUN_FAIR_SHARE_WINDOW_MS,
    jobsLocalRunners: env.LUNANEXA_JOBS_LOCAL_RUNNERS,
    jobsSlurm: jobsSlurmFromEnv(env),
    secretKey: env.LUNANEXA_SECRET_KEY,
    artifactsDir: env.LUNANEXA_ARTIFACTS_DIR,
    artifactsS3: artifactsS3FromEnv(env),
    artifactUrlTtlMs: env.LUNANEXA_ARTIFACT_URL_TTL_MS,
    filesMaxBytes: env.LUNANEXA_FILES_MAX_BYTES,
    publicUrl: env.LUNANEXA_PUBLIC_URL,
    metricsToken: env.LUNANEXA_METRICS_TOKEN,
    managementRateLimitPerMinute: env.LUNANEXA_MANAGEMENT_RATE_LIMIT_PER_MINUTE,
    consoleSignInPerMinute: env.LUNANEXA_CONSOLE_SIGN_IN_PER_MINUTE,
    workloadRetentionDays: env.LUNANEXA_WORKLOAD_RETENTION_DAYS,
    telemetrySampleMs: env.LUNANEXA_TELEMETRY_SAMPLE_MS,
    telemetryRetentionHours: env.LUNANEXA_TELEMETRY_RETENTION_HOURS,
    admissionTokenShare: env.LUNANEXA_ADMISSION_TOKEN_SHARE,
    headersTimeoutMs: env.LUNANEXA_HEADERS_TIMEOUT_MS,
    maxConnections: env.LUNANEXA_MAX_CONNECTIONS,
  });
}

/** The bucket the LUNANEXA_ARTIFACTS_S3_* variables name; any of them set without a bucket is refused, not ignored. */
function artifactsS3FromEnv(env: NodeEnv) {
  const s3 = {
    bucket: env.LUNANEXA_ARTIFACTS_S3_BUCKET,
    endpoint: env.LUNANEXA_ARTIFACTS_S3_ENDPOINT,
    region: env.LUNANEXA_ARTIFACTS_S3_REGION,
    prefix: env.LUNANEXA_ARTIFACTS_S3_PREFIX,
    forcePathStyle: env.LUNANEXA_ARTIFACTS_S3_FORCE_PATH_STYLE,
    accessKeyId: env.LUNANEXA_ARTIFACTS_S3_ACCESS_KEY_ID,
    secretAccessKey: env.LUNANEXA_ARTIFACTS_S3_SECRET_ACCESS_KEY,
  };
  return Object.values(s3).some((value) => value !== undefined) ? s3 : undefined;
}

/** The Slurm backend the LUNANEXA_JOBS_SLURM_* variables ask for; any of them set without a log directory is refused, not ignored. */
function jobsSlurmFromEnv(env: NodeEnv) {
  const words = (value: string | undefined) => value?.split(/\s+/).filter((word) => word !== '');
  const slurm = {
    logDir: env.LUNANEXA_JOBS_SLURM_LOG_DIR,
    runners: env.LUNANEXA_JOBS_SLURM_RUNNERS,
    partition: env.LUNANEXA_JOBS_SLURM_PARTITION,
    account: env.LUNANEXA_JOBS_SLURM_ACCOUNT,
    cpus: env.LUNANEXA_JOBS_SLURM_CPUS,
    memoryMiB: env.LUNANEXA_JOBS_SLURM_MEMORY_MIB,
    extraArgs: words(env.LUNANEXA_JOBS_SLURM_ARGS),
    conf: env.LUNANEXA_JOBS_SLURM_CONF,
    command: words(env.LUNANEXA_JOBS_SLURM_COMMAND),
  };
  return Object.values(slurm).some((value) => value !== undefined) ? slurm : null;
}
