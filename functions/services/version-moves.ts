import { eq, sql } from 'drizzle-orm';
import { modelEvaluations, modelVersions } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { ApprovalRequest, Provenance, RecordEvaluationRequest, Verification, VersionView } from '../../shared/contracts/registry.js';
import { ApiError } from '../kernel/errors.js';
import { dbNow } from '../store/rows.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';
import { transition, type LifecycleEvent } from '../core/registry/lifecycle.js';
import { findVersion, versionView } from './models.js';
import type { ArtifactStore } from '../kernel/ports/artifact-store.js';

/** Which version: a workspace's model and its label. */
export interface VersionRef {
  workspaceId: string;
  model: string;
  version: string;
}

export type VersionRow = typeof modelVersions.$inferSelect;

/** The verification report keeps this many problems: enough to act on, bounded whatever the folder holds. */
const PROBLEMS_KEPT = 100;

/** The lifecycle's answer to `event`, or 409 `invalid_transition` with its reason. */
export function decide(row: VersionRow, event: LifecycleEvent) {
  const moved = transition(row.state, event);
  if (!moved.ok) throw new ApiError('invalid_transition', moved.reason, { state: row.state, event: event.type });
  return moved.next;
}

/**
 * Moves a locked version by `event`: the lifecycle decides, the row takes the new state with `set` (the
 * evidence the move records), and the audit entry says who and why, all in the caller's transaction.
 */
export async function moveVersion(
  tx: ServiceCtx,
  ref: VersionRef,
  row: VersionRow,
  event: LifecycleEvent,
  change: { set?: Partial<typeof modelVersions.$inferInsert>; details?: Record<string, unknown> } = {},
): Promise<VersionView> {
  const next = decide(row, event);
  const [updated] = await tx.db
    .update(modelVersions)
    .set({ ...change.set, state: next, updatedAt: sql`now()` })
    .where(eq(modelVersions.id, row.id))
    .returning();
  await audit(tx, {
    workspaceId: ref.workspaceId,
    action: `model_version.${event.type}`,
    target: row.id,
    details: { model: ref.model, version: ref.version, from: row.state, to: next, ...change.details },
  });
  return await versionView(tx, ref.model, updated!);
}

/** Records a version's licence and provenance: candidate -> documented. */
export async function recordProvenance({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: VersionRef & { licence: string; provenance: Provenance };
}): Promise<VersionView> {
  return await withTransaction(ctx, async (tx) => {
    const row = await findVersion(tx, { ...input, lock: true });
    return await moveVersion(
      tx,
      input,
      row,
      { type: 'document', actor: ctx.actor },
      { set: { licence: input.licence, provenance: input.provenance }, details: { licence: input.licence, source: input.provenance.source } },
    );
  });
}

/**
 * Verifies a version's files in the artifact store against its manifest: documented -> verified when every
 * file's size and digest match, else rejected with a per-file report. The files are read outside any
 * transaction (a large folder takes minutes; no row stays locked that long); the version is then locked and the
 * lifecycle decides on the state it has by then. Without a store (Workers): 409 `no_artifact_store`.
 */
export async function verifyVersion({ ctx, input }: { ctx: ServiceCtx & { artifacts?: ArtifactStore }; input: VersionRef }): Promise<VersionView> {
  const before = await findVersion(ctx, input);
  if (!ctx.artifacts)
    throw new ApiError('no_artifact_store', 'this control plane has no local artifact store to verify against (on Workers there is none yet)');
  // Refused before a byte is read when the lifecycle would refuse it anyway.
  decide(before, { type: 'verify', passed: true, actor: ctx.actor });
  const report = await ctx.artifacts.verify(input, before.manifest.files);
  return await withTransaction(ctx, async (tx) => {
    const row = await findVersion(tx, { ...input, lock: true });
    const verification: Verification = {
      passed: report.problems.length === 0,
      files: report.files,
      bytes: report.bytes,
      problems: report.problems.slice(0, PROBLEMS_KEPT),
      problemCount: report.problems.length,
      by: ctx.actor,
      at: (await dbNow(tx.db)).toISOString(),
    };
    return await moveVersion(
      tx,
      input,
      row,
      { type: 'verify', passed: verification.passed, actor: ctx.actor },
      {
        set: { verification },
        details: { passed: verification.passed, files: verification.files, bytes: verification.bytes, problems: verification.problemCount },
      },
    );
  });
}

/** Records an evaluation suite's run: a passed one moves a verified version to evaluated, a failed one rejects it. */
export async function recordEvaluation({ ctx, input }: { ctx: ServiceCtx; input: VersionRef & RecordEvaluationRequest }): Promise<VersionView> {
  return await withTransaction(ctx, async (tx) => {
    const row = await findVersion(tx, { ...input, lock: true });
    // Decided before the run is stored, so that a refused move leaves no evaluation behind.
    decide(row, { type: 'evaluate', passed: input.passed, actor: ctx.actor });
    const id = newId('run');
    await tx.db
      .insert(modelEvaluations)
      .values({ id, versionId: row.id, suite: input.suite, passed: input.passed, metrics: input.metrics, notes: input.notes ?? null, recordedBy: ctx.actor });
    return await moveVersion(
      tx,
      input,
      row,
      { type: 'evaluate', passed: input.passed, actor: ctx.actor },
      { details: { evaluation: id, suite: input.suite, passed: input.passed } },
    );
  });
}

/** A person's decision on an evaluated version, with its reason: approved, or rejected. */
export async function decideApproval({ ctx, input }: { ctx: ServiceCtx; input: VersionRef & ApprovalRequest }): Promise<VersionView> {
  return await withTransaction(ctx, async (tx) => {
    const row = await findVersion(tx, { ...input, lock: true });
    return await moveVersion(tx, input, row, { type: input.decision, actor: ctx.actor }, { details: { reason: input.reason } });
  });
}
