import { and, eq, gt, isNull, ne, or, sql } from 'drizzle-orm';
import { apiTokens, consoleSessions, machineJtis } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { Role } from '../../shared/contracts/common.js';
import { hashSecret } from './secrets.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';

/** A live console session as the store holds it: the session, and who its API token is (role and workspace). */
export interface ConsoleSessionRow {
  id: string;
  tokenId: string;
  workspaceId: string;
  role: Exclude<Role, 'inference'>;
  expiresAt: Date;
}

/** A session is live while it was not ended, has not expired, and its token is neither revoked nor expired (checked on every request). */
function liveSession() {
  return and(
    isNull(consoleSessions.endedAt),
    gt(consoleSessions.expiresAt, sql`now()`),
    isNull(apiTokens.revokedAt),
    or(isNull(apiTokens.expiresAt), gt(apiTokens.expiresAt, sql`now()`)),
  );
}

/**
 * Opens a console session for an authenticated API token, audited as `console.sign-in`: a row holding the SHA-256
 * of `secret`, expiring after `ttlMs` or with the token, whichever is first (the database's clock). Returns the
 * session's id and its lifetime in seconds (what the cookie's max-age must be).
 */
export async function createConsoleSession({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { secret: string; tokenId: string; workspaceId: string; role: Role; ttlMs: number };
}): Promise<{ id: string; lifetimeS: number }> {
  const id = newId('consoleSession');
  const row = await withTransaction(ctx, async (tx) => {
    const [inserted] = await tx.db
      .insert(consoleSessions)
      .values({
        id,
        secretHash: await hashSecret(input.secret),
        tokenId: input.tokenId,
        expiresAt: sql`least(now() + make_interval(secs => ${input.ttlMs / 1000}), coalesce((select ${apiTokens.expiresAt} from ${apiTokens} where ${apiTokens.id} = ${input.tokenId}), 'infinity'::timestamptz))`,
      })
      .returning({ lifetimeS: sql<number>`extract(epoch from (${consoleSessions.expiresAt} - now()))::float8` });
    await audit(tx, { workspaceId: input.workspaceId, action: 'console.sign-in', target: id, details: { role: input.role } });
    return inserted!;
  });
  return { id, lifetimeS: Number(row.lifetimeS) };
}

/** The live session whose secret a cookie carries, or null: not ended, not expired, its API token neither revoked, expired nor an inference token. */
export async function findConsoleSession({ ctx, input }: { ctx: ServiceCtx; input: { secret: string } }): Promise<ConsoleSessionRow | null> {
  const [row] = await ctx.db
    .select({
      id: consoleSessions.id,
      tokenId: consoleSessions.tokenId,
      expiresAt: consoleSessions.expiresAt,
      workspaceId: apiTokens.workspaceId,
      role: apiTokens.role,
    })
    .from(consoleSessions)
    .innerJoin(apiTokens, eq(apiTokens.id, consoleSessions.tokenId))
    .where(and(eq(consoleSessions.secretHash, await hashSecret(input.secret)), liveSession(), ne(apiTokens.role, 'inference')))
    .limit(1);
  if (!row) return null;
  return { ...row, role: row.role as ConsoleSessionRow['role'] };
}

/** Whether the session is still live: what a long-lived console stream asks on every round. */
export async function consoleSessionLive({ ctx, input }: { ctx: ServiceCtx; input: { sessionId: string } }): Promise<boolean> {
  const rows = await ctx.db
    .select({ id: consoleSessions.id })
    .from(consoleSessions)
    .innerJoin(apiTokens, eq(apiTokens.id, consoleSessions.tokenId))
    .where(and(eq(consoleSessions.id, input.sessionId), liveSession()))
    .limit(1);
  return rows.length === 1;
}

/** Ends a console session (sign-out), audited as `console.sign-out`; ending one already ended changes nothing but is still recorded. */
export async function endConsoleSession({ ctx, input }: { ctx: ServiceCtx; input: { sessionId: string; workspaceId: string } }): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    await tx.db
      .update(consoleSessions)
      .set({ endedAt: sql`now()` })
      .where(and(eq(consoleSessions.id, input.sessionId), isNull(consoleSessions.endedAt)));
    await audit(tx, { workspaceId: input.workspaceId, action: 'console.sign-out', target: input.sessionId });
  });
}

/** Why a known API token was refused a console session. */
export type SignInRefusal = 'revoked' | 'expired' | 'inference';

/**
 * Records a refused console sign-in, never the token: a known token (revoked, expired, or an inference token) is
 * audited as `console.sign-in-failed` (outcome `denied`, its id as actor and target) in its own workspace, and its
 * reason returned; an unknown token has no workspace to audit it in: `unknown` (the caller counts and logs it).
 */
export async function recordSignInFailure({ ctx, input }: { ctx: ServiceCtx; input: { token: string } }): Promise<SignInRefusal | 'unknown'> {
  const [row] = await ctx.db
    .select({
      id: apiTokens.id,
      workspaceId: apiTokens.workspaceId,
      role: apiTokens.role,
      revoked: sql<boolean>`${apiTokens.revokedAt} is not null`,
      expired: sql<boolean>`coalesce(${apiTokens.expiresAt} <= now(), false)`,
    })
    .from(apiTokens)
    .where(eq(apiTokens.tokenHash, await hashSecret(input.token)))
    .limit(1);
  if (!row) return 'unknown';
  const reason: SignInRefusal = row.revoked ? 'revoked' : row.expired ? 'expired' : 'inference';
  await audit(
    { ...ctx, actor: row.id },
    { workspaceId: row.workspaceId, action: 'console.sign-in-failed', target: row.id, outcome: 'denied', details: { reason } },
  );
  return reason;
}

/**
 * Takes a console sign-in form's nonce: true the first time, false ever after, on every instance of the store. The
 * fence is the replay fence's table (`machine_jtis`, the machines' token ids), under `sign-in:<SHA-256 of the nonce>`
 * and the owner `console`, kept until the nonce expires and then swept with the machines' entries: a table of its own
 * would hold the same three columns.
 */
export async function takeSignInNonce({ ctx, input }: { ctx: ServiceCtx; input: { nonce: string; expiresAt: Date } }): Promise<boolean> {
  const taken = await ctx.db
    .insert(machineJtis)
    .values({ jti: `sign-in:${await hashSecret(input.nonce)}`, machineId: 'console', expiresAt: input.expiresAt })
    .onConflictDoNothing()
    .returning({ jti: machineJtis.jti });
  return taken.length === 1;
}
