import { describe, expect, it } from 'vitest';
import { swarmStatus } from '../../functions/core/swarm-status.js';

describe('swarmStatus', () => {
  const status = (extra: Partial<Parameters<typeof swarmStatus>[0] & object> = {}) => ({ desired: 2, ready: 0, degraded: false, asleep: false, ...extra });

  it("is its deployment's: creating until every wanted replica serves, then ready", () => {
    expect(swarmStatus(status())).toBe('creating');
    expect(swarmStatus(status({ ready: 1 }))).toBe('creating');
    expect(swarmStatus(status({ ready: 2 }))).toBe('ready');
  });

  it('says degraded whatever else holds, asleep when scaled to zero, stopped at 0 replicas, missing without a deployment', () => {
    expect(swarmStatus(status({ ready: 2, degraded: true }))).toBe('degraded');
    expect(swarmStatus(status({ desired: 0, asleep: true }))).toBe('asleep');
    expect(swarmStatus(status({ desired: 0 }))).toBe('stopped');
    expect(swarmStatus(undefined)).toBe('missing');
  });
});
