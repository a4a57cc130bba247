import { and, eq, gt, isNull, or, sql, type SQL } from 'drizzle-orm';
import { enrollmentTokens, machineCredentials, machines } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { newId } from '../../shared/ids.js';
import type {
  CreateEnrollmentTokenRequest,
  EnrollmentTokenCreated,
  EnrollmentTokenState,
  EnrollmentTokenView,
  EnrollRequest,
} from '../../shared/contracts/enrollment.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { hashSecret, newSecret } from './secrets.js';
import { assertStrongEd25519Key } from './ed25519-key.js';

/** Creates a single-use enrollment token; the secret is returned once and only its hash is stored. */
export async function createEnrollmentToken({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: CreateEnrollmentTokenRequest & { workspaceId: string };
}): Promise<EnrollmentTokenCreated> {
  const token = newSecret('lnxe');
  const id = newId('enrollment');
  return await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .insert(enrollmentTokens)
      .values({
        id,
        workspaceId: input.workspaceId,
        tokenHash: await hashSecret(token),
        boundName: input.name ?? null,
        labels: input.labels,
        createdBy: ctx.actor,
        expiresAt: sql`now() + make_interval(secs => ${input.ttlSeconds})`,
      })
      .returning({ expiresAt: enrollmentTokens.expiresAt });
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'enrollment_token.create',
      target: id,
      details: { name: input.name ?? null, labels: input.labels },
    });
    return { id, token, name: input.name ?? null, labels: input.labels, expiresAt: row!.expiresAt.toISOString() };
  });
}

/** What a view of an enrollment token reads: never its secret or hash; its state by the database's clock. */
const VIEW_COLUMNS = {
  id: enrollmentTokens.id,
  name: enrollmentTokens.boundName,
  labels: enrollmentTokens.labels,
  createdBy: enrollmentTokens.createdBy,
  createdAt: enrollmentTokens.createdAt,
  expiresAt: enrollmentTokens.expiresAt,
  usedAt: enrollmentTokens.usedAt,
  machineId: enrollmentTokens.machineId,
  revokedAt: enrollmentTokens.revokedAt,
  state: sql<EnrollmentTokenState>`case when ${enrollmentTokens.revokedAt} is not null then 'revoked' when ${enrollmentTokens.usedAt} is not null then 'used' when ${enrollmentTokens.expiresAt} <= now() then 'expired' else 'active' end`,
};

async function readEnrollmentTokenViews(ctx: ServiceCtx, where: SQL, limit?: number): Promise<EnrollmentTokenView[]> {
  const query = ctx.db.select(VIEW_COLUMNS).from(enrollmentTokens).where(where).orderBy(enrollmentTokens.id);
  const rows = limit === undefined ? await query : await query.limit(limit);
  return rows.map((row) => ({
    ...row,
    createdAt: row.createdAt.toISOString(),
    expiresAt: row.expiresAt.toISOString(),
    usedAt: row.usedAt?.toISOString() ?? null,
    revokedAt: row.revokedAt?.toISOString() ?? null,
  }));
}

/** One page of a workspace's enrollment tokens, in creation (id) order, whatever their state. */
export async function listEnrollmentTokens({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string } & PageRequest<string>;
}): Promise<RowPage<EnrollmentTokenView>> {
  const where = and(eq(enrollmentTokens.workspaceId, input.workspaceId), input.after !== undefined ? gt(enrollmentTokens.id, input.after) : undefined)!;
  return cutPage(await readEnrollmentTokenViews(ctx, where, input.limit + 1), input.limit);
}

/**
 * Revokes an unused enrollment token of the workspace: from the moment this returns it enrolls nothing (a leaked
 * token would otherwise enroll a machine carrying its labels until it expires). Unknown, or another workspace's:
 * 404. Already revoked: 409. Already used: 409, since it enrolls nothing more; revoke the machine it enrolled.
 * The update is conditional, as the enrollment's consume is, so that of a revocation and an enrollment racing
 * exactly one wins.
 */
export async function revokeEnrollmentToken({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; id: string } }): Promise<EnrollmentTokenView> {
  const mine = and(eq(enrollmentTokens.id, input.id), eq(enrollmentTokens.workspaceId, input.workspaceId))!;
  await withTransaction(ctx, async (tx) => {
    const revoked = await tx.db
      .update(enrollmentTokens)
      .set({ revokedAt: sql`now()` })
      .where(and(mine, isNull(enrollmentTokens.usedAt), isNull(enrollmentTokens.revokedAt)))
      .returning({ id: enrollmentTokens.id });
    if (revoked.length === 0) {
      const [row] = await tx.db.select({ usedAt: enrollmentTokens.usedAt, machineId: enrollmentTokens.machineId }).from(enrollmentTokens).where(mine);
      if (!row) throw new ApiError('not_found', `enrollment token ${input.id} not found`);
      if (row.usedAt) throw new ApiError('conflict', `the enrollment token was already used (machine ${row.machineId}); revoke that machine instead`);
      throw new ApiError('conflict', 'the enrollment token is already revoked');
    }
    await audit(tx, { workspaceId: input.workspaceId, action: 'enrollment_token.revoke', target: input.id });
  });
  const [view] = await readEnrollmentTokenViews(ctx, mine);
  return view!;
}

/** Why a token could not be consumed, told apart only after the atomic consume failed. */
async function consumeFailure(ctx: ServiceCtx, tokenHash: string, name: string): Promise<ApiError> {
  const [row] = await ctx.db
    .select({
      usedAt: enrollmentTokens.usedAt,
      revokedAt: enrollmentTokens.revokedAt,
      boundName: enrollmentTokens.boundName,
      expired: sql<boolean>`${enrollmentTokens.expiresAt} <= now()`,
    })
    .from(enrollmentTokens)
    .where(eq(enrollmentTokens.tokenHash, tokenHash));
  if (!row) return new ApiError('invalid_enrollment_token', 'the enrollment token is not valid');
  if (row.revokedAt) return new ApiError('enrollment_token_revoked', 'the enrollment token has been revoked');
  if (row.usedAt) return new ApiError('enrollment_token_used', 'the enrollment token has already been used');
  if (row.expired) return new ApiError('enrollment_token_expired', 'the enrollment token has expired');
  if (row.boundName !== null && row.boundName !== name) {
    return new ApiError('enrollment_name_mismatch', 'the enrollment token is bound to another machine name');
  }
  return new ApiError('invalid_enrollment_token', 'the enrollment token is not valid');
}

/**
 * Enrolls a machine (docs/design.md section 4). The token is consumed with one conditional UPDATE, so exactly one
 * of N concurrent uses succeeds; everything else in the transaction rolls back with it on failure.
 */
export async function enrollMachine({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config' | 'afterWrite'>;
  input: EnrollRequest;
}): Promise<{ machineId: string; workspaceId: string; credentialId: string; credentialExpiresAt: Date }> {
  // Before the token is consumed: a refused key leaves the token usable.
  assertStrongEd25519Key(input.publicKey);
  const tokenHash = await hashSecret(input.token);
  const written = await withTransaction(ctx, async (tx) => {
    const machineId = newId('machine');
    const [token] = await tx.db
      .update(enrollmentTokens)
      .set({ usedAt: sql`now()`, machineId })
      .where(
        and(
          eq(enrollmentTokens.tokenHash, tokenHash),
          isNull(enrollmentTokens.usedAt),
          isNull(enrollmentTokens.revokedAt),
          gt(enrollmentTokens.expiresAt, sql`now()`),
          or(isNull(enrollmentTokens.boundName), eq(enrollmentTokens.boundName, input.name)),
        ),
      )
      .returning();
    if (!token) throw await consumeFailure(tx, tokenHash, input.name);

    const [taken] = await tx.db
      .select({ id: machines.id })
      .from(machines)
      .where(and(eq(machines.workspaceId, token.workspaceId), eq(machines.name, input.name), isNull(machines.revokedAt)));
    if (taken) throw new ApiError('machine_name_taken', `a live machine is already named ${input.name}; revoke it first`);

    await tx.db.insert(machines).values({
      id: machineId,
      workspaceId: token.workspaceId,
      name: input.name,
      // A machine's labels are its operator's (the token's): placement must not follow what a machine says of itself.
      labels: token.labels,
      inventory: input.inventory,
    });
    const credentialId = newId('credential');
    const [credential] = await tx.db
      .insert(machineCredentials)
      .values({
        id: credentialId,
        machineId,
        publicKey: input.publicKey,
        expiresAt: sql`now() + make_interval(secs => ${ctx.config.credentialLifetimeMs / 1000})`,
      })
      .returning({ expiresAt: machineCredentials.expiresAt });
    await audit(tx, {
      workspaceId: token.workspaceId,
      action: 'machine.enroll',
      target: machineId,
      details: { name: input.name, enrollmentTokenId: token.id },
    });
    return { machineId, workspaceId: token.workspaceId, credentialId, credentialExpiresAt: credential!.expiresAt };
  });
  // Place waiting deployments on the new machine without waiting for the next tick.
  await reconcileAfterWrite(ctx);
  return written;
}
