import { describe, expect, it } from 'vitest';
import { drainUntil, IDLE, mayRestart, planSupervision, restartDelayMs, type ManagedView, type RuntimeLoad } from '../../agent/supervisor/plan.js';
import { backoffDelayMs } from '../../agent/link/backoff.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import type { RuntimeState } from '../../shared/contracts/heartbeat.js';

const policy = { mode: 'on-failure' as const, maxRestarts: 2, backoffMs: 100 };
const startup = { timeoutMs: 60_000, probeIntervalMs: 1_000, failureThreshold: 3 };
const assignment = (id: string, extra: Partial<Assignment> = {}): Assignment => ({
  assignmentId: id,
  deploymentId: 'dep',
  deploymentName: 'sim-chat',
  model: 'sim-chat',
  deploymentGeneration: 1,
  runtime: { kind: 'simulated', model: 'sim-chat', ttftMs: 1, tokensPerSecond: 10, loadMs: 0, memoryMiB: 1, failureRate: 0 },
  artifact: null,
  restartPolicy: policy,
  resources: { gpus: 0, memoryMiB: 1 },
  startup,
  templateHash: 'template-1',
  ...extra,
});
const managed = (id: string, extra: Partial<ManagedView> = {}, assignmentExtra: Partial<Assignment> = {}): ManagedView => ({
  assignment: assignment(id, assignmentExtra),
  state: 'ready',
  busy: false,
  launching: false,
  restarts: 0,
  restartAfter: null,
  ...extra,
});
const plan = (desired: Assignment[], current: ManagedView[], now = 0) => planSupervision({ desired, managed: current, now });

const STATES: RuntimeState[] = ['preparing', 'pulling', 'starting', 'ready', 'draining', 'failed', 'stopped'];
/** Every kind of work a runtime can be in: idle, a launch on its way to ready, or other work (drain, stop). */
const WORK = [
  { busy: false, launching: false },
  { busy: true, launching: true },
  { busy: true, launching: false },
];

describe('planSupervision', () => {
  it('launches what is desired and missing, retires what is no longer desired', () => {
    expect(plan([assignment('a')], [managed('b')])).toEqual([
      { type: 'launch', assignment: assignment('a') },
      { type: 'retire', assignmentId: 'b' },
    ]);
  });

  it('does nothing when the runtime matches its assignment, whatever its state and work', () => {
    for (const state of STATES.filter((s) => s !== 'failed')) {
      for (const work of WORK) {
        if (state === 'stopped' && !work.busy) continue;
        expect(plan([assignment('a')], [managed('a', { state, ...work })])).toEqual([]);
      }
    }
  });

  it('launches a desired runtime that was stopped anew (its launch aborted, the change undone)', () => {
    expect(plan([assignment('a')], [managed('a', { state: 'stopped' })])).toEqual([{ type: 'replace', assignment: assignment('a') }]);
    const bumped = assignment('a', { deploymentGeneration: 4 });
    expect(plan([bumped], [managed('a', { state: 'stopped' })])).toEqual([{ type: 'replace', assignment: bumped }]);
  });

  it('takes a generation bump in place: never a replacement, whatever the state and work', () => {
    const bumped = assignment('a', { deploymentGeneration: 7 });
    for (const state of STATES.filter((s) => s !== 'failed')) {
      for (const work of WORK) {
        if (state === 'stopped' && !work.busy) continue;
        expect(plan([bumped], [managed('a', { state, ...work })])).toEqual([{ type: 'update', assignment: bumped }]);
      }
    }
  });

  it('takes changes of startup, restart policy and names in place', () => {
    const changes: Array<Partial<Assignment>> = [
      { startup: { ...startup, timeoutMs: 5_000 } },
      { startup: { ...startup, probeIntervalMs: 200 } },
      { startup: { ...startup, failureThreshold: 10 } },
      { restartPolicy: { ...policy, mode: 'always' } },
      { deploymentName: 'renamed' },
      { deploymentGeneration: 2, startup: { ...startup, timeoutMs: 5_000 }, restartPolicy: { ...policy, maxRestarts: 9 } },
    ];
    for (const change of changes) {
      const next = assignment('a', change);
      expect(plan([next], [managed('a')])).toEqual([{ type: 'update', assignment: next }]);
    }
  });

  it('compares assignments by content, not key order or identity', () => {
    const same = assignment('a');
    const reordered = Object.fromEntries(Object.entries(same).reverse()) as Assignment;
    expect(plan([reordered], [managed('a')])).toEqual([]);
  });

  it('replaces an idle runtime only when its template changed', () => {
    const changed = assignment('a', {
      templateHash: 'template-2',
      runtime: {
        kind: 'template',
        template: 'serve',
        executable: '/usr/bin/serve',
        executableSha256: 'a'.repeat(64),
        args: [],
        env: {},
        healthPath: '/health',
      },
    });
    for (const state of STATES) expect(plan([changed], [managed('a', { state })])).toEqual([{ type: 'replace', assignment: changed }]);
    // The generation moving with it changes nothing: the template decides.
    const both = assignment('a', { templateHash: 'template-2', deploymentGeneration: 3 });
    expect(plan([both], [managed('a')])).toEqual([{ type: 'replace', assignment: both }]);
  });

  it('aborts a launch whose template changed, and leaves other work to finish', () => {
    const changed = assignment('a', { templateHash: 'template-2' });
    for (const state of ['preparing', 'pulling', 'starting'] as const) {
      expect(plan([changed], [managed('a', { state, busy: true, launching: true })])).toEqual([{ type: 'abort', assignmentId: 'a' }]);
    }
    expect(plan([changed], [managed('a', { state: 'draining', busy: true, launching: false })])).toEqual([]);
  });

  it('retires an idle runtime that left the desired state, whatever its state', () => {
    for (const state of STATES) expect(plan([], [managed('a', { state })])).toEqual([{ type: 'retire', assignmentId: 'a' }]);
  });

  it('aborts a launch that left the desired state at once, instead of waiting for it to be ready', () => {
    for (const state of ['preparing', 'pulling', 'starting'] as const) {
      expect(plan([], [managed('a', { state, busy: true, launching: true })])).toEqual([{ type: 'abort', assignmentId: 'a' }]);
    }
  });

  it('leaves a retirement or drain in progress alone', () => {
    expect(plan([], [managed('a', { state: 'draining', busy: true })])).toEqual([]);
    expect(plan([], [managed('a', { state: 'stopped', busy: true })])).toEqual([]);
  });

  it('restarts a failed runtime after its backoff, within the policy, and only when idle', () => {
    const failed = managed('a', { state: 'failed', restartAfter: 1_000 });
    expect(plan([assignment('a')], [failed], 999)).toEqual([]);
    expect(plan([assignment('a')], [failed], 1_000)).toEqual([{ type: 'restart', assignmentId: 'a' }]);
    expect(plan([assignment('a')], [{ ...failed, restarts: 2 }], 5_000)).toEqual([]);
    expect(plan([assignment('a')], [{ ...failed, restartAfter: null }], 5_000)).toEqual([]);
    expect(plan([assignment('a')], [{ ...failed, busy: true }], 5_000)).toEqual([]);
    expect(
      plan(
        [assignment('a', { restartPolicy: { ...policy, mode: 'never' } })],
        [managed('a', { state: 'failed', restartAfter: 0 }, { restartPolicy: { ...policy, mode: 'never' } })],
        5_000,
      ),
    ).toEqual([]);
  });

  it('judges a restart by the newest restart policy, taken over in the same plan', () => {
    const failed = managed('a', { state: 'failed', restarts: 2, restartAfter: 0 });
    const more = assignment('a', { restartPolicy: { ...policy, maxRestarts: 5 } });
    expect(plan([more], [failed], 10)).toEqual([
      { type: 'update', assignment: more },
      { type: 'restart', assignmentId: 'a' },
    ]);
    const never = assignment('a', { restartPolicy: { ...policy, mode: 'never' } });
    expect(plan([never], [managed('a', { state: 'failed', restartAfter: 0 })], 10)).toEqual([{ type: 'update', assignment: never }]);
  });

  it('replaces a failed runtime whose template changed instead of restarting it', () => {
    const changed = assignment('a', { templateHash: 'template-2' });
    expect(plan([changed], [managed('a', { state: 'failed', restarts: 2, restartAfter: 0 })], 10)).toEqual([{ type: 'replace', assignment: changed }]);
  });

  it('plans every runtime independently', () => {
    const desired = [
      assignment('keep'),
      assignment('bump', { deploymentGeneration: 2 }),
      assignment('swap', { templateHash: 'template-2' }),
      assignment('new'),
    ];
    const current = [
      managed('keep'),
      managed('bump'),
      managed('swap'),
      managed('gone'),
      managed('loading', { state: 'starting', busy: true, launching: true }),
    ];
    expect(plan(desired, current)).toEqual([
      { type: 'update', assignment: desired[1] },
      { type: 'replace', assignment: desired[2] },
      { type: 'launch', assignment: desired[3] },
      { type: 'retire', assignmentId: 'gone' },
      { type: 'abort', assignmentId: 'loading' },
    ]);
  });

  it('doubles the restart delay up to a minute', () => {
    expect(mayRestart(policy, 1)).toBe(true);
    expect(mayRestart(policy, 2)).toBe(false);
    expect(mayRestart({ ...policy, mode: 'never' }, 0)).toBe(false);
    expect([0, 1, 2].map((n) => restartDelayMs(policy, n))).toEqual([100, 200, 400]);
    expect(restartDelayMs(policy, 30)).toBe(60_000);
  });
});

describe('drainUntil', () => {
  const load = (queued: number, active: number, latestDeadline: number | null): RuntimeLoad => ({ queued, active, lastServedAt: null, latestDeadline });

  it('ends at once when nothing is in flight', () => {
    expect(drainUntil([], 1_000, 30_000)).toBe(1_000);
    expect(drainUntil([IDLE, load(0, 0, 99_999)], 1_000, 30_000)).toBe(1_000);
  });

  it('waits until the latest deadline in flight, at most the cap', () => {
    expect(drainUntil([load(1, 0, 5_000)], 1_000, 30_000)).toBe(5_000);
    expect(drainUntil([load(0, 1, 5_000), load(2, 3, 9_000)], 1_000, 30_000)).toBe(9_000);
    expect(drainUntil([load(0, 1, 500_000)], 1_000, 30_000)).toBe(31_000);
    // A deadline already past: nothing left to wait for.
    expect(drainUntil([load(0, 1, 10)], 1_000, 30_000)).toBe(1_000);
    // In flight with no known deadline: the cap.
    expect(drainUntil([load(1, 0, null)], 1_000, 30_000)).toBe(31_000);
  });
});

describe('reconnect backoff', () => {
  it('stays within [floor, min(cap, base * 2^attempt)] with full jitter', () => {
    expect(backoffDelayMs(0, { baseMs: 500, random: () => 0.999 })).toBe(499);
    expect(backoffDelayMs(3, { baseMs: 500, random: () => 0.5 })).toBe(2000);
    expect(backoffDelayMs(20, { baseMs: 500, capMs: 30_000, random: () => 0.999 })).toBe(29_970);
    expect(backoffDelayMs(5, { random: () => 0 })).toBe(100);
    const samples = Array.from({ length: 200 }, () => backoffDelayMs(4));
    expect(Math.max(...samples)).toBeLessThanOrEqual(8_000);
    expect(new Set(samples).size).toBeGreaterThan(50);
  });
});
