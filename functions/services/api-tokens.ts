import { and, eq, gt, isNull, or, sql, type SQL } from 'drizzle-orm';
import { apiTokens, workspaceMembers, workspaces } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { newId } from '../../shared/ids.js';
import type { Role } from '../../shared/contracts/common.js';
import type { ApiTokenCreated, ApiTokenView, TokenState } from '../../shared/contracts/tokens.js';
import { TOKENS_CHANNEL } from '../kernel/ports/bus.js';
import { queryRows } from '../store/rows.js';
import type { Actor } from '../core/principals.js';
import { audit, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { hashSecret, newSecret } from './secrets.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { roleCeilingBroken, tokenFieldsProblem } from '../core/token-rules.js';
import type { TokenCache } from './token-cache.js';

/** Neither revoked nor expired, by the database's clock. */
const isActive = (): SQL => and(isNull(apiTokens.revokedAt), or(isNull(apiTokens.expiresAt), gt(apiTokens.expiresAt, sql`now()`)))!;

/** What a token view reads: the token, its member's name, and its state by the database's clock. */
const VIEW_COLUMNS = {
  id: apiTokens.id,
  name: apiTokens.name,
  role: apiTokens.role,
  memberId: apiTokens.memberId,
  memberName: workspaceMembers.name,
  models: apiTokens.models,
  rateLimitPerMinute: apiTokens.rateLimitPerMinute,
  // Another workspace's token id is not this workspace's to see: a workspace's first admin token is created by the
  // default workspace's admin.
  createdBy: sql<
    string | null
  >`case when ${apiTokens.createdBy} = 'system' or exists (select 1 from api_tokens creator where creator.id = ${apiTokens.createdBy} and creator.workspace_id = ${apiTokens.workspaceId}) then ${apiTokens.createdBy} end`,
  createdAt: apiTokens.createdAt,
  expiresAt: apiTokens.expiresAt,
  revokedAt: apiTokens.revokedAt,
  state: sql<TokenState>`case when ${apiTokens.revokedAt} is not null then 'revoked' when ${apiTokens.expiresAt} <= now() then 'expired' else 'active' end`,
};

async function readTokenViews(ctx: ServiceCtx, where: SQL, limit?: number): Promise<ApiTokenView[]> {
  const query = ctx.db
    .select(VIEW_COLUMNS)
    .from(apiTokens)
    .leftJoin(workspaceMembers, eq(apiTokens.memberId, workspaceMembers.id))
    .where(where)
    .orderBy(apiTokens.id);
  const rows = limit === undefined ? await query : await query.limit(limit);
  return rows.map((row) => ({
    id: row.id,
    name: row.name,
    role: row.role,
    member: row.memberId !== null && row.memberName !== null ? { id: row.memberId, name: row.memberName } : null,
    models: row.models,
    rateLimitPerMinute: row.rateLimitPerMinute,
    createdBy: row.createdBy,
    createdAt: row.createdAt.toISOString(),
    expiresAt: row.expiresAt?.toISOString() ?? null,
    revokedAt: row.revokedAt?.toISOString() ?? null,
    state: row.state,
  }));
}

/** A 400 at one field of the request, shaped as the zod failures of every route are. */
const invalid = (path: string, message: string) => new ApiError('validation_failed', `${message} at ${path}`, [{ path, message }]);

/** A new API token: who it is for and what it may do. */
export interface NewApiToken {
  workspaceId: string;
  name: string;
  role: Role;
  /** An active member of the workspace: the token's role may not exceed theirs. */
  memberId?: string;
  /** The creating token's role: the new token's may not exceed it. Absent for the system (bootstrap). */
  creatorRole?: Role;
  ttlSeconds?: number;
  /** ISO-8601 with a zone; must be ahead of the database's clock. */
  expiresAt?: string;
  models?: string[];
  rateLimitPerMinute?: number;
}

/**
 * Creates an API token; the secret is in the answer once and only its SHA-256 is kept. Refused: an allow-list or
 * rate limit on a non-inference token, two expiries, an expiry in the past (400); a member that is not an active
 * member of the workspace (404); a role above the member's (400) or above the creating token's (403).
 */
export async function createApiToken({ ctx, input }: { ctx: ServiceCtx; input: NewApiToken }): Promise<ApiTokenCreated> {
  const problem = tokenFieldsProblem(input);
  if (problem) throw invalid(problem.path, problem.message);
  const token = newSecret('lnx');
  const id = newId('token');
  return await withTransaction(ctx, async (tx) => {
    let memberRole: Role | null = null;
    if (input.memberId !== undefined) {
      // Locked, so that a concurrent removal of the member either sees this token (and revokes it) or refuses it here.
      const [member] = await tx.db
        .select({ role: workspaceMembers.role })
        .from(workspaceMembers)
        .where(and(eq(workspaceMembers.id, input.memberId), eq(workspaceMembers.workspaceId, input.workspaceId), isNull(workspaceMembers.removedAt)))
        .for('update');
      if (!member) throw new ApiError('not_found', `member ${input.memberId} not found`);
      memberRole = member.role;
    }
    const broken = roleCeilingBroken({ role: input.role, memberRole, creatorRole: input.creatorRole ?? null });
    if (broken === 'member') throw invalid('role', `a token may not carry more than its member's role (${memberRole})`);
    if (broken === 'creator') throw new ApiError('forbidden', `a token may not create a token of a higher role than its own (${input.creatorRole})`);
    if (input.expiresAt !== undefined) {
      const [check] = await queryRows<{ future: boolean }>(tx.db, sql`select ${input.expiresAt}::timestamptz > now() as future`);
      if (!check?.future) throw invalid('expiresAt', 'must be in the future');
    }
    await tx.db.insert(apiTokens).values({
      id,
      workspaceId: input.workspaceId,
      name: input.name,
      role: input.role,
      tokenHash: await hashSecret(token),
      memberId: input.memberId ?? null,
      models: input.models ?? null,
      rateLimitPerMinute: input.rateLimitPerMinute ?? null,
      createdBy: ctx.actor,
      expiresAt:
        input.ttlSeconds !== undefined
          ? sql`now() + make_interval(secs => ${input.ttlSeconds})`
          : input.expiresAt !== undefined
            ? sql`${input.expiresAt}::timestamptz`
            : null,
    });
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'api_token.create',
      target: id,
      details: {
        name: input.name,
        role: input.role,
        memberId: input.memberId ?? null,
        models: input.models ?? null,
        rateLimitPerMinute: input.rateLimitPerMinute ?? null,
      },
    });
    const [view] = await readTokenViews(tx, eq(apiTokens.id, id));
    return { ...view!, token };
  });
}

/** One page of a workspace's tokens, in creation (id) order, whatever their state. */
export async function listApiTokens({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & PageRequest<string> }): Promise<RowPage<ApiTokenView>> {
  const where = and(eq(apiTokens.workspaceId, input.workspaceId), input.after !== undefined ? gt(apiTokens.id, input.after) : undefined)!;
  return cutPage(await readTokenViews(ctx, where, input.limit + 1), input.limit);
}

/** One token of the workspace, or 404 (another workspace's included). */
export async function getApiToken({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; tokenId: string } }): Promise<ApiTokenView> {
  const [view] = await readTokenViews(ctx, and(eq(apiTokens.id, input.tokenId), eq(apiTokens.workspaceId, input.workspaceId))!);
  if (!view) throw new ApiError('not_found', `token ${input.tokenId} not found`);
  return view;
}

/**
 * Refuses (409) a change that revoked admin tokens and left the workspace without an active one: nobody could then
 * manage it (only the default workspace's bootstrap re-mints one). Call in the change's transaction, after it.
 */
async function ensureAdminRemains(ctx: ServiceCtx, workspaceId: string): Promise<void> {
  const [admin] = await ctx.db
    .select({ id: apiTokens.id })
    .from(apiTokens)
    .where(and(eq(apiTokens.workspaceId, workspaceId), eq(apiTokens.role, 'admin'), isActive()))
    .limit(1);
  if (!admin) throw new ApiError('conflict', 'this would leave the workspace without an active admin token; create another admin token first');
}

/**
 * Tells every instance that tokens were revoked, after the revocation committed. This instance forgets at once,
 * before the API answers; the others as soon as the bus reaches them (the Postgres bus also brings it back to
 * this instance: forgetting twice costs nothing).
 */
export async function signalTokensRevoked(ctx: Pick<ServicePorts, 'bus'>): Promise<void> {
  ctx.bus.deliverLocal(TOKENS_CHANNEL, { type: 'tokens-revoked' });
  await ctx.bus.publish(TOKENS_CHANNEL, { type: 'tokens-revoked' });
}

/**
 * Revokes a token of the workspace: every instance refuses it from the moment this returns. Unknown, or another
 * workspace's: 404. Already revoked: 409, as for machines (the token stays listed, revoked).
 */
export async function revokeApiToken({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { workspaceId: string; tokenId: string };
}): Promise<ApiTokenView> {
  await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select({ role: apiTokens.role, revokedAt: apiTokens.revokedAt })
      .from(apiTokens)
      .where(and(eq(apiTokens.id, input.tokenId), eq(apiTokens.workspaceId, input.workspaceId)))
      .for('update');
    if (!row) throw new ApiError('not_found', `token ${input.tokenId} not found`);
    if (row.revokedAt) throw new ApiError('conflict', 'the token is already revoked');
    await tx.db.update(apiTokens).set({ revokedAt: sql`now()` }).where(eq(apiTokens.id, input.tokenId));
    if (row.role === 'admin') await ensureAdminRemains(tx, input.workspaceId);
    await audit(tx, { workspaceId: input.workspaceId, action: 'api_token.revoke', target: input.tokenId });
  });
  await signalTokensRevoked(ctx);
  return await getApiToken({ ctx, input });
}

/**
 * Revokes every unrevoked token issued to a member of the workspace, in the caller's transaction (refused, 409,
 * when that leaves the workspace without an active admin token); their ids. The caller signals the revocation
 * once it has committed (`signalTokensRevoked`).
 */
export async function revokeMemberTokens(ctx: ServiceCtx, input: { workspaceId: string; memberId: string }): Promise<string[]> {
  const rows = await ctx.db
    .update(apiTokens)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(apiTokens.workspaceId, input.workspaceId), eq(apiTokens.memberId, input.memberId), isNull(apiTokens.revokedAt)))
    .returning({ id: apiTokens.id, role: apiTokens.role });
  if (rows.some((row) => row.role === 'admin')) await ensureAdminRemains(ctx, input.workspaceId);
  return rows.map((row) => row.id);
}

/** Whether any workspace has an API token of `role` that is neither revoked nor expired. */
export async function hasActiveApiToken({ ctx, input }: { ctx: ServiceCtx; input: { role: Role } }): Promise<boolean> {
  const rows = await ctx.db
    .select({ id: apiTokens.id })
    .from(apiTokens)
    .where(and(eq(apiTokens.role, input.role), isActive()))
    .limit(1);
  return rows.length > 0;
}

/**
 * Mints the store's first admin token (an instance's bootstrap on a shared store): in one transaction serialised
 * across instances, so that instances starting together on a fresh store mint one between them. Null when an
 * active admin token exists already (another instance's, or db:bootstrap's): a new data dir mints no other.
 */
export async function mintFirstAdminToken({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string } }): Promise<string | null> {
  return await withTransaction(ctx, async (tx) => {
    await tx.db.execute(sql`select pg_advisory_xact_lock(hashtext('bootstrap-admin-token'))`);
    if (await hasActiveApiToken({ ctx: tx, input: { role: 'admin' } })) return null;
    return (await createApiToken({ ctx: tx, input: { workspaceId: input.workspaceId, name: input.name, role: 'admin' } })).token;
  });
}

/**
 * Resolves a bearer secret to its holder, or throws 401. With `cache` (the inference hot path), a successful
 * lookup is reused until a revocation clears it (`TokenCache`), and never past the token's expiry.
 */
export async function authenticateApiToken({ ctx, input }: { ctx: ServiceCtx; input: { token: string; cache?: TokenCache } }): Promise<Actor> {
  const hash = await hashSecret(input.token);
  const load = async () => {
    const [row] = await ctx.db
      .select({
        id: apiTokens.id,
        workspaceId: apiTokens.workspaceId,
        role: apiTokens.role,
        models: apiTokens.models,
        rateLimitPerMinute: apiTokens.rateLimitPerMinute,
        // The database's clock says how long it has left, so that no cache keeps it past its expiry.
        validForMs: sql<string | number | null>`(extract(epoch from (${apiTokens.expiresAt} - now())) * 1000)::float8`,
      })
      .from(apiTokens)
      .where(and(eq(apiTokens.tokenHash, hash), isActive()))
      .limit(1);
    if (!row) return null;
    const actor: Actor = { tokenId: row.id, workspaceId: row.workspaceId, role: row.role, models: row.models, rateLimitPerMinute: row.rateLimitPerMinute };
    return { actor, validForMs: row.validForMs === null ? null : Number(row.validForMs) };
  };
  const actor = input.cache ? await input.cache.resolve(hash, load) : ((await load())?.actor ?? null);
  if (!actor) throw new ApiError('invalid_token', 'the API token is unknown, expired or revoked');
  return actor;
}

/** The default workspace, created on first start. */
export async function ensureWorkspace({ ctx, input }: { ctx: ServiceCtx; input: { name: string } }): Promise<string> {
  await ctx.db
    .insert(workspaces)
    .values({ id: newId('workspace'), name: input.name })
    .onConflictDoNothing();
  const [row] = await ctx.db.select({ id: workspaces.id }).from(workspaces).where(eq(workspaces.name, input.name));
  return row!.id;
}

/** API token names by id, of every token of the workspace (revoked and expired ones too): what a page shows for a token id. */
export async function tokenNames({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } }): Promise<Map<string, string>> {
  const rows = await ctx.db.select({ id: apiTokens.id, name: apiTokens.name }).from(apiTokens).where(eq(apiTokens.workspaceId, input.workspaceId));
  return new Map(rows.map((t) => [t.id, t.name]));
}
