import { describe, expect, it } from 'vitest';
import { effectiveAgeMs, isRoutable, machineLiveness, nextResumedAt, runtimeLiveness } from '../../functions/core/fleet/liveness.js';
import { ControlPlaneConfig } from '../../functions/kernel/config.js';

const config = ControlPlaneConfig.parse({});
const t0 = new Date('2026-01-01T00:00:00Z');
const at = (ms: number) => new Date(t0.getTime() + ms);

describe('machine liveness with the protocol defaults', () => {
  const judge = (ageMs: number, extra: { revokedAt?: Date | null; resumedAt?: Date | null } = {}) =>
    machineLiveness({ lastHeartbeatAt: t0, revokedAt: extra.revokedAt ?? null, now: at(ageMs), resumedAt: extra.resumedAt ?? null, config });

  it('is ready while the heartbeat is within a keep-alive interval plus grace (35 s)', () => {
    expect(judge(0)).toBe('ready');
    expect(judge(20_000)).toBe('ready');
    expect(judge(35_000)).toBe('ready');
  });
  it('is stale after 35 s and down once the 60 s lifetime lapsed', () => {
    expect(judge(35_001)).toBe('stale');
    expect(judge(60_000)).toBe('stale');
    expect(judge(60_001)).toBe('down');
    expect(judge(3_600_000)).toBe('down');
  });
  it('is pending before its first heartbeat and revoked whatever its heartbeat says', () => {
    expect(machineLiveness({ lastHeartbeatAt: null, revokedAt: null, now: t0, resumedAt: null, config })).toBe('pending');
    expect(judge(0, { revokedAt: t0 })).toBe('revoked');
  });
  it('does not count time before a control-plane resumption against the machine, nor call it ready on an old report', () => {
    // Heartbeat 10 minutes ago, but the control plane came back 10 s ago: one period of grace, as lost sight.
    expect(judge(600_000, { resumedAt: at(590_000) })).toBe('stale');
    expect(judge(600_000, { resumedAt: at(550_000) })).toBe('stale');
    expect(judge(600_000, { resumedAt: at(540_000) })).toBe('stale');
    expect(judge(600_000, { resumedAt: at(530_000) })).toBe('down');
    // A report after the resumption is judged as ever.
    expect(machineLiveness({ lastHeartbeatAt: at(595_000), revokedAt: null, now: at(600_000), resumedAt: at(590_000), config })).toBe('ready');
  });
});

describe('runtime liveness', () => {
  const judge = (ageMs: number, machine: Parameters<typeof runtimeLiveness>[0]['machine'] = 'ready') =>
    runtimeLiveness({ reportedState: 'ready', reportedAt: t0, machine, now: at(ageMs), resumedAt: null, config });

  it('keeps the reported state through TTL plus 15 s grace', () => {
    expect(judge(75_000)).toBe('ready');
    expect(runtimeLiveness({ reportedState: 'starting', reportedAt: t0, machine: 'ready', now: at(1_000), resumedAt: null, config })).toBe('starting');
  });
  it('is stale after TTL plus grace, and down after a further TTL', () => {
    expect(judge(75_001)).toBe('stale');
    expect(judge(135_000)).toBe('stale');
    expect(judge(135_001)).toBe('down');
  });
  it('is never better than its machine', () => {
    expect(judge(0, 'stale')).toBe('stale');
    expect(judge(0, 'down')).toBe('down');
    expect(judge(0, 'revoked')).toBe('down');
    expect(judge(0, 'pending')).toBe('down');
  });
});

describe('strict routing', () => {
  const base = {
    runtime: 'ready' as const,
    machine: 'ready' as const,
    streamAttached: true,
    desiredExpiresAt: at(60_000),
    now: t0,
  };
  it('routes only when every condition holds', () => {
    expect(isRoutable(base)).toBe(true);
  });
  it.each([
    ['runtime not ready', { runtime: 'starting' as const }],
    ['runtime stale', { runtime: 'stale' as const }],
    ['machine stale', { machine: 'stale' as const }],
    ['stream detached', { streamAttached: false }],
    ['machine down', { machine: 'down' as const }],
    ['machine revoked', { machine: 'revoked' as const }],
    ['signed assignment expired', { desiredExpiresAt: at(-1) }],
    ['never signed', { desiredExpiresAt: null }],
  ])('refuses when %s', (_name, change) => {
    expect(isRoutable({ ...base, ...change })).toBe(false);
  });
});

describe('control-plane interruption', () => {
  it('records a resumption only when the last tick is older than a machine lifetime plus the tick period', () => {
    expect(nextResumedAt({ lastTickAt: null, resumedAt: null, now: t0, config })).toBeNull();
    expect(nextResumedAt({ lastTickAt: at(-5_000), resumedAt: null, now: t0, config })).toBeNull();
    expect(nextResumedAt({ lastTickAt: at(-65_000), resumedAt: null, now: t0, config })).toBeNull();
    expect(nextResumedAt({ lastTickAt: at(-65_001), resumedAt: null, now: t0, config })).toEqual(t0);
    // A Workers cron ticks once a minute: a minute between ticks is no interruption.
    const cron = { ...config, reconcileIntervalMs: 60_000 };
    expect(nextResumedAt({ lastTickAt: at(-110_000), resumedAt: null, now: t0, config: cron })).toBeNull();
    const earlier = at(-1_000_000);
    expect(nextResumedAt({ lastTickAt: at(-1_000), resumedAt: earlier, now: t0, config })).toBe(earlier);
  });
  it('effective age never goes negative and starts from the later of report and resumption', () => {
    expect(effectiveAgeMs(at(10), t0, null)).toBe(0);
    expect(effectiveAgeMs(t0, at(5_000), at(4_000))).toBe(1_000);
    expect(effectiveAgeMs(at(4_000), at(5_000), t0)).toBe(1_000);
  });
});
