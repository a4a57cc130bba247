import type { Role } from '../../shared/contracts/common.js';

/**
 * The order of roles: each can do what the ones below it can. `inference` is the lowest rung: every role may
 * call `/v1`, only `inference` may do nothing else (docs/security.md, "Roles").
 */
const RANK: Record<Role, number> = { inference: 0, viewer: 1, operator: 2, admin: 3 };

/** True when a token of role `held` may do what needs `needed`. */
export function roleCovers(held: Role, needed: Role): boolean {
  return RANK[held] >= RANK[needed];
}

/**
 * Which ceiling a new token's role would break, or null: a token never carries more than the member it is issued
 * to (null: issued to no member), nor more than the token that creates it (null: the system, at bootstrap).
 */
export function roleCeilingBroken(input: { role: Role; memberRole: Role | null; creatorRole: Role | null }): 'member' | 'creator' | null {
  if (input.memberRole !== null && !roleCovers(input.memberRole, input.role)) return 'member';
  if (input.creatorRole !== null && !roleCovers(input.creatorRole, input.role)) return 'creator';
  return null;
}

/** What a new token asks for, as far as its own fields go. */
export interface TokenFields {
  role: Role;
  models?: readonly string[];
  rateLimitPerMinute?: number;
  ttlSeconds?: number;
  expiresAt?: string;
}

/**
 * The first field of a new token that contradicts another, or null. An allow-list and a rate limit belong to
 * inference tokens only: the other roles manage the fleet, and a limit there would read as a promise the
 * management API does not keep. One expiry, given one way.
 */
export function tokenFieldsProblem(fields: TokenFields): { path: string; message: string } | null {
  if (fields.role !== 'inference') {
    if (fields.models !== undefined) return { path: 'models', message: 'a model allow-list applies to inference tokens only' };
    if (fields.rateLimitPerMinute !== undefined) return { path: 'rateLimitPerMinute', message: 'a rate limit applies to inference tokens only' };
  }
  if (fields.ttlSeconds !== undefined && fields.expiresAt !== undefined) return { path: 'expiresAt', message: 'give ttlSeconds or expiresAt, not both' };
  return null;
}

/**
 * Whether a token with allow-list `models` (null: every model of its workspace) may call `model`. A model
 * outside the list answers exactly as one that does not exist, so a token learns nothing of the others.
 */
export function modelAllowed(models: readonly string[] | null, model: string): boolean {
  return models === null || models.includes(model);
}
