import { describe, expect, it } from 'vitest';
import { modelAllowed, roleCeilingBroken, roleCovers, tokenFieldsProblem } from '../../functions/core/token-rules.js';
import type { Role } from '../../shared/contracts/common.js';

const ROLES: Role[] = ['inference', 'viewer', 'operator', 'admin'];

describe('roleCovers', () => {
  it('orders inference < viewer < operator < admin, each covering the ones below it', () => {
    for (const [i, held] of ROLES.entries()) {
      for (const [j, needed] of ROLES.entries()) expect(roleCovers(held, needed), `${held} covers ${needed}`).toBe(i >= j);
    }
  });
});

describe('roleCeilingBroken', () => {
  it('lets a token carry at most its member role and its creator role', () => {
    expect(roleCeilingBroken({ role: 'operator', memberRole: 'operator', creatorRole: 'admin' })).toBeNull();
    expect(roleCeilingBroken({ role: 'inference', memberRole: 'viewer', creatorRole: 'admin' })).toBeNull();
    expect(roleCeilingBroken({ role: 'admin', memberRole: 'operator', creatorRole: 'admin' })).toBe('member');
    expect(roleCeilingBroken({ role: 'viewer', memberRole: 'inference', creatorRole: 'admin' })).toBe('member');
    expect(roleCeilingBroken({ role: 'admin', memberRole: null, creatorRole: 'operator' })).toBe('creator');
  });

  it('has no ceiling where there is no member (bootstrap tokens) or no creating token (the system)', () => {
    for (const role of ROLES) expect(roleCeilingBroken({ role, memberRole: null, creatorRole: null })).toBeNull();
  });

  it('names the member ceiling first when both are broken', () => {
    expect(roleCeilingBroken({ role: 'admin', memberRole: 'viewer', creatorRole: 'operator' })).toBe('member');
  });
});

describe('tokenFieldsProblem', () => {
  it('keeps allow-lists and rate limits to inference tokens', () => {
    expect(tokenFieldsProblem({ role: 'inference', models: ['a'], rateLimitPerMinute: 5 })).toBeNull();
    for (const role of ['viewer', 'operator', 'admin'] as const) {
      expect(tokenFieldsProblem({ role, models: ['a'] })?.path).toBe('models');
      expect(tokenFieldsProblem({ role, rateLimitPerMinute: 5 })?.path).toBe('rateLimitPerMinute');
      expect(tokenFieldsProblem({ role })).toBeNull();
    }
  });

  it('takes one expiry, given one way', () => {
    expect(tokenFieldsProblem({ role: 'viewer', ttlSeconds: 60 })).toBeNull();
    expect(tokenFieldsProblem({ role: 'viewer', expiresAt: '2999-01-01T00:00:00Z' })).toBeNull();
    expect(tokenFieldsProblem({ role: 'viewer', ttlSeconds: 60, expiresAt: '2999-01-01T00:00:00Z' })?.path).toBe('expiresAt');
  });
});

describe('modelAllowed', () => {
  it('allows every model without a list, and only the listed ones with one (exact names)', () => {
    expect(modelAllowed(null, 'anything')).toBe(true);
    expect(modelAllowed(['sim-chat'], 'sim-chat')).toBe(true);
    expect(modelAllowed(['sim-chat'], 'sim-chat2')).toBe(false);
    expect(modelAllowed(['sim-chat'], 'SIM-CHAT')).toBe(false);
    expect(modelAllowed([], 'sim-chat')).toBe(false);
  });
});
