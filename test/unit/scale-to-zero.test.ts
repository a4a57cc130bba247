import { describe, expect, it } from 'vitest';
import { shouldSleep } from '../../functions/controller/sleep.js';

const now = new Date('2026-12-02T12:00:00Z');
const ago = (s: number) => new Date(now.getTime() - s * 1000);
const idle = (extra: Partial<Parameters<typeof shouldSleep>[0]> = {}) =>
  shouldSleep({
    scaleToZero: { idleSeconds: 300 },
    asleepSince: null,
    lastRequestAt: ago(301),
    wokenAt: null,
    updatedAt: ago(3600),
    busy: false,
    now,
    ...extra,
  });

describe('shouldSleep', () => {
  it('sleeps once the last activity is idleSeconds old, not a moment before', () => {
    expect(idle()).toBe(true);
    expect(idle({ lastRequestAt: ago(300) })).toBe(true);
    expect(idle({ lastRequestAt: ago(299) })).toBe(false);
  });

  it('last activity is the latest of its newest request, its waking and its last change', () => {
    expect(idle({ wokenAt: ago(10) })).toBe(false);
    expect(idle({ updatedAt: ago(10) })).toBe(false);
    expect(idle({ lastRequestAt: null, wokenAt: null, updatedAt: ago(301) })).toBe(true);
    expect(idle({ lastRequestAt: null, wokenAt: ago(200), updatedAt: ago(900) })).toBe(false);
  });

  it('never while a runtime reports active or queued invocations, never without scaleToZero, never twice', () => {
    expect(idle({ busy: true })).toBe(false);
    expect(idle({ scaleToZero: null })).toBe(false);
    expect(idle({ asleepSince: ago(60) })).toBe(false);
  });
});
