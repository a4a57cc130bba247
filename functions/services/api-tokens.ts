import { and, eq, gt, isNull, or, sql } from 'drizzle-orm';
import { apiTokens, workspaces } from '../store/schema/index.js';
import { ApiError } from '../errors.js';
import { newId } from '../../shared/ids.js';
import type { Role } from '../../shared/contracts/common.js';
import type { Actor } from './principals.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';
import { hashSecret, newSecret } from './secrets.js';
import type { TtlCache } from './ttl-cache.js';

/** Creates an API token; the secret is returned once and only its hash is kept. */
export async function createApiToken({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; name: string; role: Role };
}): Promise<{ id: string; token: string }> {
  const token = newSecret('lnx');
  const id = newId('token');
  await withTransaction(ctx, async (tx) => {
    await tx.db.insert(apiTokens).values({ id, workspaceId: input.workspaceId, name: input.name, role: input.role, tokenHash: await hashSecret(token) });
    await audit(tx, { workspaceId: input.workspaceId, action: 'api_token.create', target: id, details: { name: input.name, role: input.role } });
  });
  return { id, token };
}

/** Whether any workspace has an API token of `role` that is neither revoked nor expired. */
export async function hasActiveApiToken({ ctx, input }: { ctx: ServiceCtx; input: { role: Role } }): Promise<boolean> {
  const rows = await ctx.db
    .select({ id: apiTokens.id })
    .from(apiTokens)
    .where(and(eq(apiTokens.role, input.role), isNull(apiTokens.revokedAt), or(isNull(apiTokens.expiresAt), gt(apiTokens.expiresAt, sql`now()`))))
    .limit(1);
  return rows.length > 0;
}

/**
 * Resolves a bearer secret to its holder, or throws 401. With `cache` (the inference hot path), successful
 * lookups are reused for the cache's lifetime: a revoked or expired token stops working within it. Keyed by
 * the token's hash, so no secret is held.
 */
export async function authenticateApiToken({ ctx, input }: { ctx: ServiceCtx; input: { token: string; cache?: TtlCache<Actor> } }): Promise<Actor> {
  const hash = await hashSecret(input.token);
  const cached = input.cache?.get(hash);
  if (cached) return cached;
  const [row] = await ctx.db
    .select({ id: apiTokens.id, workspaceId: apiTokens.workspaceId, role: apiTokens.role })
    .from(apiTokens)
    .where(
      and(
        eq(apiTokens.tokenHash, hash),
        isNull(apiTokens.revokedAt),
        or(isNull(apiTokens.expiresAt), gt(apiTokens.expiresAt, sql`now()`)),
      ),
    )
    .limit(1);
  if (!row) throw new ApiError('invalid_token', 'the API token is unknown, expired or revoked');
  const actor: Actor = { tokenId: row.id, workspaceId: row.workspaceId, role: row.role };
  input.cache?.set(hash, actor);
  return actor;
}

/** The default workspace, created on first start. */
export async function ensureWorkspace({ ctx, input }: { ctx: ServiceCtx; input: { name: string } }): Promise<string> {
  await ctx.db.insert(workspaces).values({ id: newId('workspace'), name: input.name }).onConflictDoNothing();
  const [row] = await ctx.db.select({ id: workspaces.id }).from(workspaces).where(eq(workspaces.name, input.name));
  return row!.id;
}
