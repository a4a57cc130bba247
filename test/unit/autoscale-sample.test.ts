import { describe, expect, it } from 'vitest';
import { deploymentSample } from '../../functions/core/autoscale/sample.js';
import type { FleetSnapshot } from '../../functions/core/fleet/snapshot.js';

type Runtime = FleetSnapshot['machines'][number]['runtimes'][number];

/** A runtime of `dep_a`'s stable set, ready and routable, with `extra` over it; only what a sample reads. */
const runtime = (extra: Partial<Runtime> = {}): Runtime =>
  ({ deploymentId: 'dep_a', desired: true, track: 'stable', routable: true, activeInvocations: 0, queueDepth: 0, engine: null, ...extra }) as Runtime;

const snapshot = (machines: Array<{ liveness: string; runtimes: Runtime[] }>): FleetSnapshot =>
  ({ now: new Date('2026-12-07T12:00:00Z'), machines }) as unknown as FleetSnapshot;

const counts = { requests: 7, open: 0, ttftP95Ms: 420 };

describe('a deployment load sample', () => {
  it("takes each stable replica's in-flight count before and after its head, and its engine's queue where the engine reports one", () => {
    const engine = { requestsRunning: 4, requestsWaiting: 3, kvCacheUsage: 0.5, promptTokensTotal: 1, generationTokensTotal: 1 };
    const sample = deploymentSample(
      snapshot([
        { liveness: 'ready', runtimes: [runtime({ activeInvocations: 4, queueDepth: 3, engine })] },
        { liveness: 'ready', runtimes: [runtime({ activeInvocations: 1, queueDepth: 2 })] },
      ]),
      'dep_a',
      { ...counts, open: 10 },
    );
    expect(sample).toEqual({
      at: Date.parse('2026-12-07T12:00:00Z'),
      replicas: [
        { machineStale: false, ready: true, queueDepth: 3, inFlight: 7 },
        // No engine metrics: the invocations waiting for their head stand for its queue.
        { machineStale: false, ready: true, queueDepth: 2, inFlight: 3 },
      ],
      ttftP95Ms: 420,
      requests: 7,
      waiting: 0,
    });
  });

  it('counts open requests no replica reports as waiting, minding retiring and canary replicas, which hold some', () => {
    const sample = deploymentSample(
      snapshot([
        {
          liveness: 'ready',
          runtimes: [
            runtime({ activeInvocations: 2 }),
            runtime({ desired: false, activeInvocations: 3 }),
            runtime({ track: 'canary', activeInvocations: 1, queueDepth: 1 }),
            runtime({ deploymentId: 'dep_b', activeInvocations: 50 }),
          ],
        },
      ]),
      'dep_a',
      { ...counts, open: 12 },
    );
    // The stable set's one desired replica is sampled; 12 open less 7 reported on this deployment wait.
    expect(sample.replicas).toEqual([{ machineStale: false, ready: true, queueDepth: 0, inFlight: 2 }]);
    expect(sample.waiting).toBe(5);
    // Reports ahead of the records (a request finished, its record not written yet) are no negative wait.
    expect(deploymentSample(snapshot([{ liveness: 'ready', runtimes: [runtime({ activeInvocations: 4 })] }]), 'dep_a', counts).waiting).toBe(0);
  });

  it('marks replicas on machines that are not ready as stale, and keeps replicas that do not route as not ready', () => {
    const sample = deploymentSample(
      snapshot([
        { liveness: 'stale', runtimes: [runtime({ activeInvocations: 9 })] },
        { liveness: 'down', runtimes: [runtime()] },
        { liveness: 'ready', runtimes: [runtime({ routable: false })] },
      ]),
      'dep_a',
      counts,
    );
    expect(sample.replicas.map((r) => [r.machineStale, r.ready])).toEqual([
      [true, true],
      [true, true],
      [false, false],
    ]);
  });

  it('has no replica for a deployment the fleet does not run', () => {
    expect(deploymentSample(snapshot([{ liveness: 'ready', runtimes: [runtime()] }]), 'dep_z', { requests: 0, open: 3, ttftP95Ms: null })).toMatchObject({
      replicas: [],
      waiting: 3,
      ttftP95Ms: null,
    });
  });
});
