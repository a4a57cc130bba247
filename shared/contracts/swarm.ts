import { z } from 'zod';
import { JobBackend } from './job-backend.js';
import { DeploymentName, DeploymentSpec } from './deployment.js';

/** A swarm's name: a DNS label, as a deployment's. */
export const SwarmName = DeploymentName;
export type SwarmName = z.infer<typeof SwarmName>;

/**
 * The deployment a swarm creates or reconciles: the deployments API's spec (`PUT /api/v1/deployments/{name}`),
 * and its name, the swarm's unless given.
 */
const SwarmDeployment = DeploymentSpec.safeExtend({ name: DeploymentName.optional() });

/** What the jobs submitted to a swarm get unless they say otherwise (docs/jobs.md, "Swarms"). */
const SwarmJobDefaults = z.object({
  backend: JobBackend.optional(),
  concurrency: z.number().int().min(1).max(256).optional(),
  maxAttempts: z.number().int().min(1).max(20).optional(),
});

const SwarmFields = {
  deployment: SwarmDeployment,
  jobs: SwarmJobDefaults.default({}),
};

/**
 * A swarm (docs/jobs.md, "Swarms"): an endpoint and the jobs that use it, as one record of the control plane, so
 * that it outlives whatever brought it up. `deployment` is the deployment it serves through; `jobs` the defaults of
 * the jobs submitted to it.
 */
export const SwarmConfig = z.object({ name: SwarmName, ...SwarmFields });
export type SwarmConfig = z.infer<typeof SwarmConfig>;

/**
 * The body of `PUT /api/v1/swarms/{name}` (up): a `SwarmConfig`, its name the path's (a name in the body must be
 * the same), so that a whole config file can be sent as it is.
 */
export const SwarmUp = z.object({ name: SwarmName.optional(), ...SwarmFields });
export type SwarmUp = z.infer<typeof SwarmUp>;

/**
 * Where a swarm stands, from its deployment's status on every read: `creating` (fewer replicas serve than wanted,
 * none failed), `ready` (every wanted replica serves), `degraded` (a replica failed, or one cannot be placed: the
 * reasons say which), `asleep` (scaled to zero: the next request wakes it), `stopped` (0 replicas wanted), `missing`
 * (its deployment was deleted outside the swarm: up again creates it).
 */
export const SwarmStatus = z.enum(['creating', 'ready', 'degraded', 'asleep', 'stopped', 'missing']);
export type SwarmStatus = z.infer<typeof SwarmStatus>;

const count = z.number().int();

/** A swarm's jobs: how many in each state (`JobView`'s), and in all. */
export const SwarmJobs = z.object({
  total: count,
  pending: count,
  running: count,
  finalizing: count,
  completed: count,
  failed: count,
  cancelling: count,
  cancelled: count,
  expired: count,
});
export type SwarmJobs = z.infer<typeof SwarmJobs>;

/** A swarm as the management API shows it (`GET /api/v1/swarms/{name}`). */
export const SwarmView = z.object({
  id: z.string(),
  name: z.string(),
  config: SwarmConfig,
  /** The name of its deployment. */
  deployment: z.string(),
  /** The model its endpoint serves: the `model` of requests and of its jobs' rows. */
  model: z.string(),
  /**
   * Its OpenAI-compatible base URL: `<public URL>/v1` where the control plane knows its public URL
   * (LUNANEXA_PUBLIC_URL), else the path `/v1`, for the client to resolve against the URL it reached the plane at.
   */
  endpoint: z.string(),
  status: SwarmStatus,
  replicas: z.object({ desired: z.number().int(), ready: z.number().int(), starting: z.number().int(), failed: z.number().int() }),
  /** Why it is degraded (its deployment's `degradedReasons`); empty otherwise. */
  reasons: z.array(z.string()),
  jobs: SwarmJobs,
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type SwarmView = z.infer<typeof SwarmView>;

/** The answer to `DELETE /api/v1/swarms/{name}` (down): the jobs it cancelled, and whether it retired its deployment. */
export const SwarmDown = z.object({
  name: z.string(),
  deleted: z.literal(true),
  cancelledJobs: z.array(z.string()),
  deploymentDeleted: z.boolean(),
});
export type SwarmDown = z.infer<typeof SwarmDown>;
