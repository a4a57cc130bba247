import { and, eq, gt, isNull, or, sql } from 'drizzle-orm';
import { enrollmentTokens, machineCredentials, machines } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { newId } from '../../shared/ids.js';
import type { CreateEnrollmentTokenRequest, EnrollmentTokenCreated, EnrollRequest } from '../../shared/contracts/enrollment.js';
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

/** Why a token could not be consumed, told apart only after the atomic consume failed. */
async function consumeFailure(ctx: ServiceCtx, tokenHash: string, name: string): Promise<ApiError> {
  const [row] = await ctx.db
    .select({ usedAt: enrollmentTokens.usedAt, boundName: enrollmentTokens.boundName, expired: sql<boolean>`${enrollmentTokens.expiresAt} <= now()` })
    .from(enrollmentTokens)
    .where(eq(enrollmentTokens.tokenHash, tokenHash));
  if (!row) return new ApiError('invalid_enrollment_token', 'the enrollment token is not valid');
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
