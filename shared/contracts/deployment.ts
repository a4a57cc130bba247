import { z } from 'zod';
import { Labels } from './common.js';
import { ArtifactPin, RestartPolicy, SimulatedRuntime, StartupSpec } from './desired.js';
import { EnvValue, EnvName, ParamName, TemplateName } from './runtime-template.js';
import { StartupProgress } from './heartbeat.js';
import { AliasName, ModelName, VersionLabel } from './registry.js';
import { DataClass } from './placement.js';
import { AutoscaleSpec, AutoscalerDecision } from './autoscale.js';

export const DeploymentName = z
  .string()
  .regex(/^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$/, 'lowercase letters, digits, dots, dashes and underscores, 1-64 characters');

/**
 * What a deployment runs: a registered runtime template with its parameters and environment (operators never
 * write a command line), or the built-in simulator.
 */
export const DeploymentRuntime = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('template'),
    template: TemplateName,
    params: z.record(ParamName, z.union([z.string().max(1024), z.number(), z.boolean()])).default({}),
    env: z.record(EnvName, EnvValue).default({}),
  }),
  SimulatedRuntime,
]);
export type DeploymentRuntime = z.infer<typeof DeploymentRuntime>;

/**
 * How a changed spec rolls out (as Kubernetes Deployments do): at most `maxSurge` replicas above the desired
 * count while new ones start, at most `maxUnavailable` below it while old ones drain.
 */
export const RolloutSpec = z.object({
  maxSurge: z.number().int().min(0).max(64).default(1),
  maxUnavailable: z.number().int().min(0).max(64).default(0),
});
export type RolloutSpec = z.infer<typeof RolloutSpec>;

/**
 * The registry version a deployment serves: through an alias (it follows the alias: moving the alias rolls the
 * deployment, which is how a promotion or a rollback reaches users) or pinned to one version.
 */
export const ModelSource = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('alias'), alias: AliasName }),
  z.object({ kind: z.literal('version'), model: ModelName, version: VersionLabel }),
]);
export type ModelSource = z.infer<typeof ModelSource>;

/**
 * A canary: another version of the same model on its own replicas, taking `weight` percent of the deployment's
 * requests (routing honours it while both sets serve). Starting it moves the version to `canary`.
 */
export const CanarySpec = z.object({
  version: VersionLabel,
  weight: z.number().int().min(0).max(100),
  replicas: z.number().int().min(1).max(64).default(1),
  /** Labels the canary's machines must carry besides the deployment's (to keep it on one node, say). */
  selector: Labels.default({}),
});
export type CanarySpec = z.infer<typeof CanarySpec>;

/** Scale to zero: after `idleSeconds` without a request the replicas stop and release their reservation. */
export const ScaleToZero = z.object({
  idleSeconds: z
    .number()
    .int()
    .min(10)
    .max(7 * 86_400),
});
export type ScaleToZero = z.infer<typeof ScaleToZero>;

/** The most restarts a deployment's restart policy may allow a replica before it has failed for good. */
export const MAX_RESTARTS = 1_000;
/** The longest backoff between two restarts: an hour. */
export const MAX_RESTART_BACKOFF_MS = 3_600_000;

/**
 * A deployment's restart policy as the API takes it: the signed assignment's `RestartPolicy`, bounded (past a
 * bound: 400 `validation_failed`).
 */
const DeploymentRestartPolicy = RestartPolicy.extend({
  maxRestarts: z.number().int().nonnegative().max(MAX_RESTARTS).default(5),
  backoffMs: z.number().int().nonnegative().max(MAX_RESTART_BACKOFF_MS).default(1000),
});

const DeploymentFields = z.object({
  model: z.string().min(1).max(256),
  runtime: DeploymentRuntime,
  artifact: ArtifactPin.nullable().default(null),
  restartPolicy: DeploymentRestartPolicy.default(DeploymentRestartPolicy.parse({})),
  replicas: z.number().int().min(0).max(1024),
  selector: Labels.default({}),
  /** Where its weights come from: a registry alias or version (then `artifact` stays null). */
  source: ModelSource.nullable().default(null),
  canary: CanarySpec.nullable().default(null),
  gpus: z.number().int().min(0).max(64).default(0),
  /**
   * How many of its replicas (per set) one machine may run, while its resources allow: 1 by default, so that a
   * machine lost takes one replica with it. Raise it to pack GPU replicas onto multi-GPU machines.
   */
  replicasPerMachine: z.number().int().min(1).max(64).default(1),
  /** Memory each of its GPUs must offer. */
  gpuMemoryMiB: z
    .number()
    .int()
    .min(0)
    .max(16 * 1024 * 1024)
    .default(0),
  memoryMiB: z.number().int().min(0).default(0),
  /** The data it handles: the workspace's policy says which machines and runtimes may see it. */
  dataClass: DataClass.nullable().default(null),
  scaleToZero: ScaleToZero.nullable().default(null),
  /**
   * The replica count follows the load between `minReplicas` and `maxReplicas` (docs/autoscaling.md); `replicas`
   * is then only the count it starts with, and `minReplicas: 0` scales to zero as `scaleToZero` does.
   */
  autoscale: AutoscaleSpec.nullable().default(null),
  /** Concurrent invocations per replica; more wait in its queue under their deadline. */
  maxConcurrency: z.number().int().min(1).max(4096).default(16),
  /** Admission bound on queued + running invocations of the deployment. */
  queueCapacity: z.number().int().min(1).max(100_000).default(256),
  startup: StartupSpec.default(StartupSpec.parse({})),
  rollout: RolloutSpec.default(RolloutSpec.parse({})).refine((r) => r.maxSurge + r.maxUnavailable > 0, 'maxSurge and maxUnavailable cannot both be 0'),
});

/** The declarative spec of a deployment: PUT it, and the controller makes the fleet match. */
export const DeploymentSpec = DeploymentFields.refine((spec) => spec.source === null || spec.artifact === null, {
  message: 'a deployment takes its files from its registry source or from artifact, not both',
  path: ['artifact'],
})
  .refine((spec) => spec.canary === null || spec.source !== null, {
    message: 'a canary is another version of the source: name a source first',
    path: ['canary'],
  })
  .refine((spec) => spec.autoscale === null || spec.scaleToZero === null, {
    message: 'an autoscaled deployment scales to zero with autoscale.minReplicas 0, not scaleToZero',
    path: ['scaleToZero'],
  })
  .refine((spec) => spec.autoscale?.target.metric !== 'inFlightPerReplica' || spec.autoscale.target.value <= spec.maxConcurrency, {
    message: 'an inFlightPerReplica target above maxConcurrency is never reached: a replica runs at most maxConcurrency at once',
    path: ['autoscale', 'target', 'value'],
  });
export type DeploymentSpec = z.infer<typeof DeploymentSpec>;

export const DeploymentView = DeploymentFields.extend({
  id: z.string(),
  name: z.string(),
  generation: z.number().int(),
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type DeploymentView = z.infer<typeof DeploymentView>;

export const DeploymentEventType = z.enum(['placed', 'started', 'ready', 'failed', 'replica_failed', 'drained', 'retired', 'asleep', 'woken', 'scaled']);
export type DeploymentEventType = z.infer<typeof DeploymentEventType>;

/** One thing that happened to a deployment's replicas (bounded list, oldest first). */
export const DeploymentEvent = z.object({
  type: DeploymentEventType,
  machineId: z.string().nullable(),
  assignmentId: z.string().nullable(),
  message: z.string().nullable(),
  at: z.string(),
});
export type DeploymentEvent = z.infer<typeof DeploymentEvent>;

/** A replica of the deployment as the fleet read model sees it now. */
const ReplicaStatus = z.object({
  assignmentId: z.string(),
  machineId: z.string(),
  machineName: z.string(),
  state: z.string(),
  /** Runs the deployment's current template (false: an outdated replica a rollout will replace). */
  current: z.boolean(),
  /** Its replica set: the stable version's, or the canary's. */
  track: z.enum(['stable', 'canary']),
  /** Still desired (false: retired, draining on its node until it stops). */
  desired: z.boolean(),
  routable: z.boolean(),
  restarts: z.number().int(),
  message: z.string().nullable(),
  progress: StartupProgress.nullable(),
});

/** Derived from the fleet read model and the scheduler on every read, never stored. */
export const DeploymentStatus = z.object({
  /** Replicas wanted of the stable set (0 while asleep); the canary's are in `canary`. */
  desired: z.number().int(),
  /** Desired replicas serving (routable), of both sets. */
  ready: z.number().int(),
  /** Desired replicas preparing, pulling or starting. */
  starting: z.number().int(),
  failed: z.number().int(),
  /**
   * Replicas the scheduler could not place (both sets), with its reason for each machine it rejected; a reason that
   * holds a whole set back (the workspace quota, a source that does not resolve, replacement paused) is in
   * `degradedReasons`.
   */
  unplaceable: z.number().int(),
  unplaceableReasons: z.array(z.object({ machineId: z.string(), machineName: z.string(), reason: z.string() })),
  /**
   * True while a replica of the current template is failed, or while fewer replicas serve than desired because
   * replicas failed for good (open marks on their machines) or cannot be placed; `degradedReasons` says which.
   */
  degraded: z.boolean(),
  degradedReasons: z.array(z.string()),
  /** The canary's replica set while the deployment has one (of another version than the stable set's), else null. */
  canary: z
    .object({
      version: z.string(),
      desired: z.number().int(),
      ready: z.number().int(),
      starting: z.number().int(),
    })
    .nullable(),
  /** Scaled to zero: no replica is wanted until a request wakes it. */
  asleep: z.boolean(),
  /** The autoscaler's latest decision (one a controller pass), while the deployment is autoscaled and it decided once. */
  autoscaler: AutoscalerDecision.nullable().default(null),
  rollout: z.object({
    /** `complete` once every desired replica runs the current template and serves, and nothing outdated is left. */
    state: z.enum(['complete', 'progressing']),
    updated: z.number().int(),
    outdated: z.number().int(),
    /** Replicas retired but still reported by their node (draining in-flight work). */
    retiring: z.number().int(),
  }),
  replicas: z.array(ReplicaStatus),
});
export type DeploymentStatus = z.infer<typeof DeploymentStatus>;

export const DeploymentDetail = DeploymentView.extend({ status: DeploymentStatus, events: z.array(DeploymentEvent) });

/** A deployment as the list shows it: its status's counts, as `GET /deployments/{name}` has them, so a fleet view is one request. */
export const DeploymentListItem = DeploymentView.extend({
  status: DeploymentStatus.pick({ desired: true, ready: true, starting: true, failed: true, unplaceable: true, degraded: true, asleep: true }),
});
export type DeploymentListItem = z.infer<typeof DeploymentListItem>;
export type DeploymentDetail = z.infer<typeof DeploymentDetail>;
