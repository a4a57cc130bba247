import { z } from 'zod';
import { Labels } from './common.js';
import { ArtifactPin, RestartPolicy, RuntimeSpec } from './desired.js';

export const DeploymentName = z.string().regex(/^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$/, 'lowercase letters, digits, dots, dashes and underscores, 1-64 characters');

/** The declarative spec of a deployment: PUT it, and the controller makes the fleet match. */
export const DeploymentSpec = z.object({
  model: z.string().min(1).max(256),
  runtime: RuntimeSpec,
  artifact: ArtifactPin.nullable().default(null),
  restartPolicy: RestartPolicy.default(RestartPolicy.parse({})),
  replicas: z.number().int().min(0).max(1024),
  selector: Labels.default({}),
  gpus: z.number().int().min(0).max(64).default(0),
  memoryMiB: z.number().int().min(0).default(0),
  /** Concurrent invocations per replica; more wait in its queue under their deadline. */
  maxConcurrency: z.number().int().min(1).max(4096).default(16),
  /** Admission bound on queued + running invocations of the deployment. */
  queueCapacity: z.number().int().min(1).max(100_000).default(256),
});
export type DeploymentSpec = z.infer<typeof DeploymentSpec>;

export const DeploymentView = DeploymentSpec.extend({
  id: z.string(),
  name: z.string(),
  generation: z.number().int(),
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type DeploymentView = z.infer<typeof DeploymentView>;
