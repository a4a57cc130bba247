import { describe, expect, it } from 'vitest';
import { AutoscaleSpec, MAX_AUTOSCALE_REPLICAS, MAX_SCALE_DOWN_AFTER_MS, MAX_SCALE_UP_AFTER_MS, MAX_TTFT_TARGET_MS } from '../../shared/contracts/autoscale.js';

const base = { minReplicas: 1, maxReplicas: 4, target: { metric: 'inFlightPerReplica', value: 8 } };
/** The messages a spec is refused with, as `path: message`; [] when it parses. */
const refusals = (spec: Record<string, unknown>) => {
  const parsed = AutoscaleSpec.safeParse(spec);
  return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

describe('AutoscaleSpec', () => {
  it('fills the periods in: 30 s before a scale-up, 5 min before a scale-down', () => {
    expect(AutoscaleSpec.parse(base)).toEqual({ ...base, scaleUpAfterMs: 30_000, scaleDownAfterMs: 300_000 });
  });

  it.each([
    ['a fractional queue depth target', { target: { metric: 'queueDepthPerReplica', value: 0.5 } }],
    ['a TTFT target', { target: { metric: 'ttftP95Ms', value: 1500 } }],
    ['the lowest bounds', { minReplicas: 0, maxReplicas: 1 }],
    ['the highest bounds', { minReplicas: MAX_AUTOSCALE_REPLICAS, maxReplicas: MAX_AUTOSCALE_REPLICAS }],
    ['min equal to max', { minReplicas: 3, maxReplicas: 3 }],
    ['the longest periods', { scaleUpAfterMs: MAX_SCALE_UP_AFTER_MS, scaleDownAfterMs: MAX_SCALE_DOWN_AFTER_MS }],
    ['no wait at all', { scaleUpAfterMs: 0, scaleDownAfterMs: 0 }],
    ['the slowest TTFT target', { target: { metric: 'ttftP95Ms', value: MAX_TTFT_TARGET_MS } }],
    ['the largest queue depth target', { target: { metric: 'queueDepthPerReplica', value: 100_000 } }],
    ['the largest in-flight target', { target: { metric: 'inFlightPerReplica', value: 4096 } }],
  ])('accepts %s', (_what, over) => {
    expect(refusals({ ...base, ...over })).toEqual([]);
  });

  it.each([
    [{ minReplicas: -1 }, 'minReplicas: minReplicas must be at least 0'],
    [{ minReplicas: 1.5 }, 'minReplicas: minReplicas must be a whole number'],
    [{ minReplicas: '1' }, 'minReplicas: minReplicas must be a number'],
    [{ minReplicas: undefined }, 'minReplicas: minReplicas is required'],
    [{ minReplicas: 0, maxReplicas: 0 }, 'maxReplicas: maxReplicas must be at least 1'],
    [{ maxReplicas: 65 }, 'maxReplicas: maxReplicas must be at most 64'],
    [{ minReplicas: 5, maxReplicas: 4 }, 'maxReplicas: maxReplicas must be at least minReplicas'],
    [{ target: undefined }, 'target: target is required: { metric, value }'],
    [{ target: { metric: 'gpuUtilisation', value: 1 } }, "target.metric: target's metric must be one of queueDepthPerReplica, inFlightPerReplica, ttftP95Ms"],
    [{ target: { metric: 'queueDepthPerReplica', value: 0 } }, 'target.value: queueDepthPerReplica target must be above 0'],
    [{ target: { metric: 'inFlightPerReplica', value: -2 } }, 'target.value: inFlightPerReplica target must be above 0'],
    [{ target: { metric: 'inFlightPerReplica', value: 4097 } }, 'target.value: inFlightPerReplica target must be at most 4096'],
    [{ target: { metric: 'queueDepthPerReplica', value: 100_001 } }, 'target.value: queueDepthPerReplica target must be at most 100000'],
    [{ target: { metric: 'ttftP95Ms', value: 600_001 } }, 'target.value: ttftP95Ms target (ms) must be at most 600000'],
    [{ target: { metric: 'ttftP95Ms' } }, 'target.value: ttftP95Ms target (ms) is required'],
    [{ target: { metric: 'ttftP95Ms', value: Number.POSITIVE_INFINITY } }, 'target.value: ttftP95Ms target (ms) must be a number'],
    [{ scaleUpAfterMs: -1 }, 'scaleUpAfterMs: scaleUpAfterMs must be at least 0'],
    [{ scaleUpAfterMs: MAX_SCALE_UP_AFTER_MS + 1 }, 'scaleUpAfterMs: scaleUpAfterMs must be at most 3600000'],
    [{ scaleUpAfterMs: 0.5 }, 'scaleUpAfterMs: scaleUpAfterMs must be a whole number'],
    [{ scaleDownAfterMs: MAX_SCALE_DOWN_AFTER_MS + 1 }, 'scaleDownAfterMs: scaleDownAfterMs must be at most 86400000'],
    [{ scaleDownAfterMs: null }, 'scaleDownAfterMs: scaleDownAfterMs must be a number'],
  ])('refuses %j: "%s"', (over, message) => {
    expect(refusals({ ...base, ...over })).toEqual([message]);
  });

  it('says every violation at once', () => {
    expect(refusals({ ...base, minReplicas: 65, maxReplicas: 64 })).toEqual([
      'minReplicas: minReplicas must be at most 64',
      'maxReplicas: maxReplicas must be at least minReplicas',
    ]);
    expect(refusals({ minReplicas: -1, maxReplicas: 0, target: { metric: 'ttftP95Ms', value: 0 } })).toEqual([
      'minReplicas: minReplicas must be at least 0',
      'maxReplicas: maxReplicas must be at least 1',
      'target.value: ttftP95Ms target (ms) must be above 0',
    ]);
  });
});
