import { z } from 'zod';
import { ControlPlaneConfig } from './config.js';

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
  /** Embedded store, admin token and simulator state live here. */
  LUNANEXA_DATA_DIR: z.string().default('.lunanexa'),
  /** When set, the store is this PostgreSQL instead of the embedded one. */
  DATABASE_URL: z.string().url().optional(),
  /**
   * Key of runtime secrets, base64 of 32 bytes. Unset on Node: `<data dir>/secret.key`, generated on first
   * start. Instances sharing one database need the same key.
   */
  LUNANEXA_SECRET_KEY: ControlPlaneConfig.shape.secretKey,
  /** The local artifact store; unset: `<data dir>/artifacts`. */
  LUNANEXA_ARTIFACTS_DIR: ControlPlaneConfig.shape.artifactsDir,
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
    secretKey: env.LUNANEXA_SECRET_KEY,
    artifactsDir: env.LUNANEXA_ARTIFACTS_DIR,
  });
}
