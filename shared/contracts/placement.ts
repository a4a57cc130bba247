import { z } from 'zod';
import { Labels } from './common.js';
import { Licence } from './registry.js';
import { TemplateName } from './runtime-template.js';

/** A class of data a deployment handles (`public`, `internal`, `pii`...): the workspace's policy says where it may run. */
export const DataClass = z.string().regex(/^[a-z][a-z0-9-]{0,31}$/, 'lowercase letters, digits and dashes, 1-32 characters, starting with a letter');
export type DataClass = z.infer<typeof DataClass>;

/**
 * Where one data class may go. A machine must carry every label of `machineSelector`; `runtimes` lists the runtime
 * templates allowed to see it (null: any; the built-in simulator counts as `simulated`). Payloads are never kept:
 * `none` is the only retention the control plane implements, and the default.
 */
const DataClassRule = z.object({
  machineSelector: Labels.default({}),
  runtimes: z
    .array(z.union([TemplateName, z.literal('simulated')]))
    .max(64)
    .nullable()
    .default(null),
  retention: z.literal('none').default('none'),
  /**
   * How many days the files of a job on a deployment of this class are kept, its input and its outputs alike
   * (docs/jobs.md, "Retention"): each then expires and is deleted. Null: until deleted.
   */
  filesDays: z.number().int().min(1).max(3_660).nullable().default(null),
});

/** Where a model under one licence may run (a research-only licence on the research machines, say). */
const LicenceRule = z.object({ machineSelector: Labels });

/** A workspace's ceiling on what its replicas reserve, summed over every live assignment; absent: unbounded. */
export const WorkspaceQuota = z.object({
  gpus: z.number().int().min(0).max(1_000_000).optional(),
  // Summed against int4 columns' values: bounded as they are (2 PiB of MiB is no limit in practice).
  memoryMiB: z
    .number()
    .int()
    .min(0)
    .max(2 ** 31 - 1)
    .optional(),
  replicas: z.number().int().min(0).max(1_000_000).optional(),
});
export type WorkspaceQuota = z.infer<typeof WorkspaceQuota>;

/**
 * A workspace's placement policy (`PUT /api/v1/workspaces/current/policy`, admin): its quota, which data classes
 * exist and where each may run, and where models of given licences may run. A deployment naming a data class
 * the policy does not list is refused; one with none is unconstrained by class.
 */
export const WorkspacePolicy = z.object({
  quota: WorkspaceQuota.default({}),
  dataClasses: z
    .record(DataClass, DataClassRule)
    .refine((classes) => Object.keys(classes).length <= 32, 'at most 32 data classes')
    .default({}),
  licences: z
    .record(Licence, LicenceRule)
    .refine((licences) => Object.keys(licences).length <= 64, 'at most 64 licence rules')
    .default({}),
});
export type WorkspacePolicy = z.infer<typeof WorkspacePolicy>;
