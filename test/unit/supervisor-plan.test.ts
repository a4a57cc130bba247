import { describe, expect, it } from 'vitest';
import { mayRestart, planSupervision, restartDelayMs, type ManagedView } from '../../agent/supervisor/plan.js';
import { backoffDelayMs } from '../../agent/link/backoff.js';
import type { Assignment } from '../../shared/contracts/desired.js';

const policy = { mode: 'on-failure' as const, maxRestarts: 2, backoffMs: 100 };
const assignment = (id: string, generation = 1): Assignment => ({
  assignmentId: id,
  deploymentId: 'dep',
  deploymentName: 'sim-chat',
  model: 'sim-chat',
  deploymentGeneration: generation,
  runtime: { kind: 'simulated', model: 'sim-chat', ttftMs: 1, tokensPerSecond: 10, loadMs: 0, memoryMiB: 1, failureRate: 0 },
  artifact: null,
  restartPolicy: policy,
  resources: { gpus: 0, memoryMiB: 1 },
});
const managed = (id: string, extra: Partial<ManagedView> = {}): ManagedView => ({
  assignmentId: id,
  deploymentGeneration: 1,
  state: 'ready',
  busy: false,
  restarts: 0,
  restartAfter: null,
  restartPolicy: policy,
  ...extra,
});

describe('planSupervision', () => {
  it('launches what is desired and missing, retires what is no longer desired', () => {
    expect(planSupervision({ desired: [assignment('a')], managed: [managed('b')], now: 0 })).toEqual([
      { type: 'launch', assignment: assignment('a') },
      { type: 'retire', assignmentId: 'b' },
    ]);
  });
  it('leaves busy runtimes alone and does nothing when matched', () => {
    expect(planSupervision({ desired: [assignment('a')], managed: [managed('a')], now: 0 })).toEqual([]);
    expect(planSupervision({ desired: [assignment('a', 2)], managed: [managed('a', { busy: true })], now: 0 })).toEqual([]);
    expect(planSupervision({ desired: [], managed: [managed('a', { busy: true })], now: 0 })).toEqual([]);
    expect(planSupervision({ desired: [], managed: [managed('a', { state: 'stopped' })], now: 0 })).toEqual([]);
  });
  it('replaces a runtime whose deployment generation changed', () => {
    expect(planSupervision({ desired: [assignment('a', 2)], managed: [managed('a')], now: 0 })).toEqual([{ type: 'replace', assignment: assignment('a', 2) }]);
  });
  it('restarts a failed runtime after its backoff, within the policy', () => {
    const failed = managed('a', { state: 'failed', restartAfter: 1_000 });
    expect(planSupervision({ desired: [assignment('a')], managed: [failed], now: 999 })).toEqual([]);
    expect(planSupervision({ desired: [assignment('a')], managed: [failed], now: 1_000 })).toEqual([{ type: 'restart', assignmentId: 'a' }]);
    expect(planSupervision({ desired: [assignment('a')], managed: [{ ...failed, restarts: 2 }], now: 5_000 })).toEqual([]);
    expect(planSupervision({ desired: [assignment('a')], managed: [{ ...failed, restartPolicy: { ...policy, mode: 'never' } }], now: 5_000 })).toEqual([]);
  });
  it('doubles the restart delay up to a minute', () => {
    expect(mayRestart(policy, 1)).toBe(true);
    expect(mayRestart(policy, 2)).toBe(false);
    expect([0, 1, 2].map((n) => restartDelayMs(policy, n))).toEqual([100, 200, 400]);
    expect(restartDelayMs(policy, 30)).toBe(60_000);
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
