import { describe, expect, it } from 'vitest';
import {
  MAX_GANG_TIMEOUT_MS,
  MAX_RUN_BACKOFF_MS,
  MAX_RUN_GPUS,
  MAX_RUN_GROUPS,
  MAX_RUN_PRIORITY,
  MAX_RUN_RESTARTS,
  MAX_RUN_WORKERS,
  RunName,
  RunSpec,
} from '../../shared/contracts/run.js';
import { demandTotal, runDemand } from '../../functions/core/runs/demand.js';

const parse = (spec: Record<string, unknown>) => RunSpec.safeParse({ template: 'train', ...spec });
const messages = (spec: Record<string, unknown>) => {
  const result = parse(spec);
  return result.success ? [] : result.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
};

describe('the run spec', () => {
  it('takes a worker count with defaults for everything else', () => {
    const spec = RunSpec.parse({ template: 'train', workers: 4 });
    expect(spec).toEqual({
      template: 'train',
      params: {},
      resources: { gpus: 1, cores: 0, memoryMiB: 0, gpuMemoryMiB: 0 },
      workers: 4,
      priority: 0,
      gang: null,
      failurePolicy: { action: 'fail', maxRestarts: 3, backoff: { initialMs: 10_000, maxMs: 300_000 } },
      selector: {},
    });
    expect(RunSpec.parse({ template: 'train', gpus: 8, gang: {} }).gang).toEqual({ timeoutMs: 600_000 });
  });

  it('asks for workers, gpus or groups, never two of them', () => {
    expect(messages({})).toEqual(['workers: run: name workers or gpus']);
    expect(messages({ workers: 2, gpus: 2 })).toEqual(['workers: run: name workers or gpus, not both']);
    expect(messages({ workers: 2, groups: [{ name: 'a', workers: 1 }] })).toEqual(['groups: with groups, each group names its workers or gpus']);
    expect(messages({ groups: [{ name: 'a' }] })).toEqual(['groups.0: group a: name workers or gpus']);
    expect(messages({ groups: [] })).toEqual(['groups: groups, when given, name at least one group']);
    expect(
      messages({
        groups: [
          { name: 'a', workers: 1 },
          { name: 'a', workers: 2 },
        ],
      }),
    ).toEqual(['groups.1.name: group a is named twice']);
  });

  it('shapes a GPU count into workers of resources.gpus each', () => {
    expect(messages({ gpus: 12, resources: { gpus: 8 } })).toEqual(['workers: run: gpus (12) must be a multiple of resources.gpus (8)']);
    expect(messages({ gpus: 8, resources: { gpus: 0 } })).toEqual([
      'workers: run: a GPU count needs resources.gpus of at least 1 (each worker takes resources.gpus)',
    ]);
    const spec = RunSpec.parse({ template: 'train', gpus: 16, resources: { gpus: 2, cores: 8, memoryMiB: 4096 } });
    expect(runDemand(spec)).toEqual([{ name: null, workers: 8, need: { gpus: 2, cores: 8, memoryMiB: 4096, gpuMemoryMiB: 0 } }]);
    expect(demandTotal(runDemand(spec))).toEqual({ gpus: 16, cores: 64, memoryMiB: 32_768, workers: 8 });
  });

  it('gives each group the run resources unless it has its own, in the spec order', () => {
    const spec = RunSpec.parse({
      template: 'train',
      resources: { gpus: 1, cores: 4 },
      groups: [
        { name: 'trainer', gpus: 8 },
        { name: 'ps', workers: 2, resources: { gpus: 0, cores: 16 } },
      ],
    });
    expect(runDemand(spec)).toEqual([
      { name: 'trainer', workers: 8, need: { gpus: 1, cores: 4, memoryMiB: 0, gpuMemoryMiB: 0 } },
      { name: 'ps', workers: 2, need: { gpus: 0, cores: 16, memoryMiB: 0, gpuMemoryMiB: 0 } },
    ]);
    expect(messages({ resources: { gpus: 0 }, groups: [{ name: 'x', gpus: 4 }] })).toEqual([
      'groups.0: group x: a GPU count needs resources.gpus of at least 1 (each worker takes resources.gpus)',
    ]);
  });

  it('bounds every number, naming the field', () => {
    expect(messages({ workers: 0 })).toEqual(['workers: workers must be at least 1']);
    expect(messages({ workers: MAX_RUN_WORKERS + 1 })).toEqual([`workers: workers must be at most ${MAX_RUN_WORKERS}`]);
    expect(messages({ workers: 1.5 })).toEqual(['workers: workers must be a whole number']);
    expect(messages({ gpus: MAX_RUN_GPUS + 1 })).toEqual([`gpus: gpus must be at most ${MAX_RUN_GPUS}`]);
    expect(messages({ gpus: MAX_RUN_WORKERS + 1 })).toEqual([`workers: at most ${MAX_RUN_WORKERS} workers in all, this run has ${MAX_RUN_WORKERS + 1}`]);
    expect(messages({ workers: 1, priority: MAX_RUN_PRIORITY + 1 })).toEqual([`priority: priority must be at most ${MAX_RUN_PRIORITY}`]);
    expect(messages({ workers: 1, priority: -1 })).toEqual(['priority: priority must be at least 0']);
    expect(messages({ workers: 1, resources: { gpus: 65 } })).toEqual(['resources.gpus: resources.gpus must be at most 64']);
    expect(messages({ workers: 1, resources: { cores: 1025 } })).toEqual(['resources.cores: resources.cores must be at most 1024']);
    expect(messages({ workers: 1, resources: { memoryMiB: 2 ** 31 } })).toEqual([`resources.memoryMiB: resources.memoryMiB must be at most ${2 ** 31 - 1}`]);
    expect(messages({ workers: 1, resources: { gpuMemoryMiB: -1 } })).toEqual(['resources.gpuMemoryMiB: resources.gpuMemoryMiB must be at least 0']);
    expect(messages({ workers: 1, gang: { timeoutMs: 999 } })).toEqual(['gang.timeoutMs: gang.timeoutMs must be at least 10000']);
    expect(messages({ workers: 1, gang: { timeoutMs: MAX_GANG_TIMEOUT_MS + 1 } })).toEqual([
      `gang.timeoutMs: gang.timeoutMs must be at most ${MAX_GANG_TIMEOUT_MS}`,
    ]);
    expect(messages({ workers: 1, failurePolicy: { maxRestarts: MAX_RUN_RESTARTS + 1 } })).toEqual([
      `failurePolicy.maxRestarts: failurePolicy.maxRestarts must be at most ${MAX_RUN_RESTARTS}`,
    ]);
    expect(messages({ workers: 1, failurePolicy: { backoff: { initialMs: 10, maxMs: 1000 } } })).toEqual([
      'failurePolicy.backoff.initialMs: failurePolicy.backoff.initialMs must be at least 100',
    ]);
    expect(messages({ workers: 1, failurePolicy: { backoff: { initialMs: 1000, maxMs: MAX_RUN_BACKOFF_MS + 1 } } })).toEqual([
      `failurePolicy.backoff.maxMs: failurePolicy.backoff.maxMs must be at most ${MAX_RUN_BACKOFF_MS}`,
    ]);
    expect(messages({ workers: 1, failurePolicy: { backoff: { initialMs: 5000, maxMs: 1000 } } })).toEqual([
      'failurePolicy.backoff.maxMs: failurePolicy.backoff.initialMs must not exceed maxMs',
    ]);
    expect(messages({ workers: 1, params: { lr: 1e16 } })).not.toEqual([]);
    expect(messages({ workers: 1, params: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`p${i}`, i])) })).toEqual(['params: at most 64 params']);
  });

  it('bounds the workers of all groups together', () => {
    const groups = Array.from({ length: 2 }, (_, i) => ({ name: `g${i}`, workers: MAX_RUN_WORKERS / 2 + 1 }));
    expect(messages({ groups })).toEqual([`workers: at most ${MAX_RUN_WORKERS} workers in all, this run has ${MAX_RUN_WORKERS + 2}`]);
    expect(messages({ groups: Array.from({ length: MAX_RUN_GROUPS + 1 }, (_, i) => ({ name: `g${i}`, workers: 1 })) })).toEqual([
      `groups: at most ${MAX_RUN_GROUPS} groups`,
    ]);
  });

  it('keeps names short enough for worker names within a DNS label', () => {
    expect(RunName.safeParse('a'.repeat(40)).success).toBe(true);
    expect(RunName.safeParse('a'.repeat(41)).success).toBe(false);
    expect(RunName.safeParse('Train').success).toBe(false);
    expect(messages({ groups: [{ name: '1x', workers: 1 }] })[0]).toContain('starting with a letter');
    expect(`${'a'.repeat(40)}-${'g'.repeat(16)}-${MAX_RUN_WORKERS - 1}`.length).toBeLessThanOrEqual(63);
  });
});
