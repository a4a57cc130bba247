import { and, eq, gt, isNull, sql } from 'drizzle-orm';
import { workspaceMembers } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { newId } from '../../shared/ids.js';
import type { Role } from '../../shared/contracts/common.js';
import type { MemberRemoved, MemberView } from '../../shared/contracts/tokens.js';
import { audit, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { revokeMemberTokens, signalTokensRevoked } from './api-tokens.js';

const memberView = (row: typeof workspaceMembers.$inferSelect): MemberView => ({
  id: row.id,
  name: row.name,
  role: row.role,
  createdAt: row.createdAt.toISOString(),
});

/** Adds a member: the highest role a token issued to them may carry. A name already taken in the workspace: 409. */
export async function addMember({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string; role: Role } }): Promise<MemberView> {
  return await withTransaction(ctx, async (tx) => {
    // The partial unique index (workspace, name) of active members is the guard; no row back means it is taken.
    const [row] = await tx.db
      .insert(workspaceMembers)
      .values({ id: newId('member'), workspaceId: input.workspaceId, name: input.name, role: input.role })
      .onConflictDoNothing()
      .returning();
    if (!row) throw new ApiError('conflict', `a member named ${JSON.stringify(input.name)} already exists in this workspace`);
    await audit(tx, { workspaceId: input.workspaceId, action: 'member.add', target: row.id, details: { name: row.name, role: row.role } });
    return memberView(row);
  });
}

/** One page of a workspace's active members, in the order they were added (id). */
export async function listMembers({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & PageRequest<string> }): Promise<RowPage<MemberView>> {
  const rows = await ctx.db
    .select()
    .from(workspaceMembers)
    .where(
      and(
        eq(workspaceMembers.workspaceId, input.workspaceId),
        isNull(workspaceMembers.removedAt),
        input.after !== undefined ? gt(workspaceMembers.id, input.after) : undefined,
      ),
    )
    .orderBy(workspaceMembers.id)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: page.items.map(memberView), more: page.more };
}

/**
 * Removes a member and, in the same transaction, revokes every token issued to them; every instance then refuses
 * those tokens. Unknown, already removed, or another workspace's: 404. Refused (409) when it would leave the
 * workspace without an active admin token.
 */
export async function removeMember({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { workspaceId: string; memberId: string };
}): Promise<MemberRemoved> {
  const revokedTokens = await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .update(workspaceMembers)
      .set({ removedAt: sql`now()` })
      .where(and(eq(workspaceMembers.id, input.memberId), eq(workspaceMembers.workspaceId, input.workspaceId), isNull(workspaceMembers.removedAt)))
      .returning({ id: workspaceMembers.id, name: workspaceMembers.name });
    if (!row) throw new ApiError('not_found', `member ${input.memberId} not found`);
    const revoked = await revokeMemberTokens(tx, { workspaceId: input.workspaceId, memberId: input.memberId });
    await audit(tx, { workspaceId: input.workspaceId, action: 'member.remove', target: input.memberId, details: { name: row.name, revokedTokens: revoked } });
    return revoked;
  });
  if (revokedTokens.length > 0) await signalTokensRevoked(ctx);
  return { id: input.memberId, removed: true, revokedTokens };
}
