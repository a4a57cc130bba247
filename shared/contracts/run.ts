import { z } from 'zod';
import { Labels } from './common.js';
import { ParamName, TemplateName } from './runtime-template.js';

/** The most workers one run may have, all groups together. */
export const MAX_RUN_WORKERS = 4096;
/** The most GPUs one run may ask for by count. */
export const MAX_RUN_GPUS = 32_768;
export const MAX_RUN_GROUPS = 8;
export const MAX_RUN_PRIORITY = 1000;
export const MAX_RUN_RESTARTS = 100;
/** The longest back-off between two restarts, and the longest a gang may take to assemble: an hour, a day. */
export const MAX_RUN_BACKOFF_MS = 3_600_000;
export const MAX_GANG_TIMEOUT_MS = 86_400_000;

/** A whole number within bounds, each refusal naming the field. */
const count = (field: string, min: number, max: number) =>
  z
    .number(`${field} must be a number`)
    .int(`${field} must be a whole number`)
    .min(min, `${field} must be at least ${min}`)
    .max(max, `${field} must be at most ${max}`);

/**
 * A run's name. Its workers are `<run>-<rank>` or `<run>-<group>-<rank>`: 40 characters leave room for a group and
 * a rank within a DNS label's 63.
 */
export const RunName = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/, 'lowercase letters, digits and dashes, 1-40 characters');
export type RunName = z.infer<typeof RunName>;

const RunGroupName = z.string().regex(/^[a-z]([a-z0-9-]{0,14}[a-z0-9])?$/, 'lowercase letters, digits and dashes, 1-16 characters, starting with a letter');

/**
 * What each worker reserves on its machine: whole GPUs, CPU cores, memory (counted as a deployment's `memoryMiB`:
 * GPU memory on discrete-GPU machines, host memory on unified-memory and GPU-less ones) and, as a filter, the
 * memory each of its GPUs must have. A worker takes one GPU unless told otherwise; a CPU-only run says `gpus: 0`.
 */
const WorkerResources = z.object({
  gpus: count('resources.gpus', 0, 64).default(1),
  cores: count('resources.cores', 0, 1024).default(0),
  memoryMiB: count('resources.memoryMiB', 0, 2 ** 31 - 1).default(0),
  gpuMemoryMiB: count('resources.gpuMemoryMiB', 0, 16 * 1024 * 1024).default(0),
});
type WorkerResources = z.infer<typeof WorkerResources>;

/**
 * What happens when a worker fails (a non-zero exit, a start that failed, its process gone, its machine down):
 * restart that worker, restart the whole run, or fail the run. Restarts wait `initialMs`, doubling each time up to
 * `maxMs`; past `maxRestarts` the run fails. A gang always restarts as a whole.
 */
export const FailurePolicy = z.object({
  action: z.enum(['restart-worker', 'restart-run', 'fail']).default('fail'),
  maxRestarts: count('failurePolicy.maxRestarts', 0, MAX_RUN_RESTARTS).default(3),
  backoff: z
    .object({
      initialMs: count('failurePolicy.backoff.initialMs', 100, MAX_RUN_BACKOFF_MS).default(10_000),
      maxMs: count('failurePolicy.backoff.maxMs', 100, MAX_RUN_BACKOFF_MS).default(300_000),
    })
    .refine((b) => b.initialMs <= b.maxMs, { message: 'failurePolicy.backoff.initialMs must not exceed maxMs', path: ['maxMs'] })
    .default({ initialMs: 10_000, maxMs: 300_000 }),
});
export type FailurePolicy = z.infer<typeof FailurePolicy>;

/** A gang starts only when every worker is placed and ready to start; not assembled within `timeoutMs`, it is released. */
const Gang = z.object({
  timeoutMs: count('gang.timeoutMs', 10_000, MAX_GANG_TIMEOUT_MS).default(600_000),
});

/** How many workers: a count, or a GPU count the scheduler shapes into machines (`gpus / resources.gpus` workers). */
const sized = {
  workers: count('workers', 1, MAX_RUN_WORKERS).optional(),
  gpus: count('gpus', 1, MAX_RUN_GPUS).optional(),
};

/** A group of a run's workers with resources of their own (a trainer and its parameter servers, say). */
const RunGroup = z.object({
  name: RunGroupName,
  ...sized,
  /** Absent: the run's `resources`. */
  resources: WorkerResources.optional(),
});

/** A template parameter's value, as a run or a command job gives it. */
export const ParamValue = z.union([z.string().max(1024), z.number().min(-1e15).max(1e15), z.boolean()]);

const RunFields = z.object({
  /** A registered runtime template: the run's workers are its processes, with these parameters. */
  template: TemplateName,
  params: z
    .record(ParamName, ParamValue)
    .refine((params) => Object.keys(params).length <= 64, 'at most 64 params')
    .default({}),
  resources: WorkerResources.default(WorkerResources.parse({})),
  ...sized,
  groups: z.array(RunGroup).min(1, 'groups, when given, name at least one group').max(MAX_RUN_GROUPS, `at most ${MAX_RUN_GROUPS} groups`).optional(),
  /** Higher first; capped at the ceiling the workspace is granted. */
  priority: count('priority', 0, MAX_RUN_PRIORITY).default(0),
  gang: Gang.nullable().default(null),
  failurePolicy: FailurePolicy.default(FailurePolicy.parse({})),
  /** Labels a machine must carry to take one of its workers. */
  selector: Labels.default({}),
});

type Sized = { workers?: number | undefined; gpus?: number | undefined; resources: WorkerResources };

/** How many workers a run or group has, or why its size is refused. */
function sizeOf(sized: Sized, where: string): { workers: number } | { error: string } {
  if (sized.workers !== undefined && sized.gpus !== undefined) return { error: `${where}: name workers or gpus, not both` };
  if (sized.workers !== undefined) return { workers: sized.workers };
  if (sized.gpus === undefined) return { error: `${where}: name workers or gpus` };
  const each = sized.resources.gpus;
  if (each === 0) return { error: `${where}: a GPU count needs resources.gpus of at least 1 (each worker takes resources.gpus)` };
  if (sized.gpus % each !== 0) return { error: `${where}: gpus (${sized.gpus}) must be a multiple of resources.gpus (${each})` };
  return { workers: sized.gpus / each };
}

/**
 * A run as the API accepts it: a job template with parameters, what each worker reserves, how many workers (a
 * count, a GPU count, or groups of either), a priority, an optional gang, a failure policy and a machine selector.
 */
export const RunSpec = RunFields.superRefine(
  (spec, ctx) => {
    const fail = (message: string, path: (string | number)[]) => ctx.addIssue({ code: 'custom', message, path });
    let total = 0;
    if (spec.groups === undefined) {
      const size = sizeOf(spec, 'run');
      if ('error' in size) return fail(size.error, ['workers']);
      total = size.workers;
    } else {
      if (spec.workers !== undefined || spec.gpus !== undefined) return fail('with groups, each group names its workers or gpus', ['groups']);
      const names = new Set<string>();
      for (const [i, group] of spec.groups.entries()) {
        if (names.has(group.name)) return fail(`group ${group.name} is named twice`, ['groups', i, 'name']);
        names.add(group.name);
        const size = sizeOf({ ...group, resources: group.resources ?? spec.resources }, `group ${group.name}`);
        if ('error' in size) return fail(size.error, ['groups', i]);
        total += size.workers;
      }
    }
    if (total > MAX_RUN_WORKERS) fail(`at most ${MAX_RUN_WORKERS} workers in all, this run has ${total}`, ['workers']);
    // Once every field is within its bounds: a refusal is then about how they go together, never a repeat.
  },
  { when: (payload) => payload.issues.length === 0 },
);
export type RunSpec = z.infer<typeof RunSpec>;
