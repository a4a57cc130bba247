import { and, asc, desc, eq, gt, isNull, lt, sql } from 'drizzle-orm';
import { FileName, FilePurpose, type FileDeleted, type FileList, type FileListQuery, type FileObject } from '../../shared/contracts/openai-files.js';
import { isId, newId } from '../../shared/ids.js';
import { ApiError, parseOr400 } from '../kernel/errors.js';
import type { OpenedFile } from '../kernel/ports/artifact-store.js';
import { fileDataKey, ObjectTooLargeError, type ObjectStore } from '../kernel/ports/object-store.js';
import { files } from '../store/schema/index.js';
import { audit, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';

type FileRow = typeof files.$inferSelect;

/** What the file verbs run with: the artifact store's writable side, absent where there is none (Workers). */
export type FilesCtx = ServiceCtx & { objects?: ObjectStore };

/** A file's bytes in the store, not yet a file of the workspace: `recordFile` makes it one, `discardFileObject` removes it. */
export interface StagedFile {
  id: string;
  workspaceId: string;
  key: string;
  bytes: number;
  sha256: string;
}

const epochS = (at: Date) => Math.floor(at.getTime() / 1000);

const fileObject = (row: FileRow): FileObject => ({
  id: row.id,
  object: 'file',
  bytes: row.bytes,
  created_at: epochS(row.createdAt),
  filename: row.filename,
  purpose: row.purpose,
  status: 'processed',
  expires_at: row.expiresAt ? epochS(row.expiresAt) : null,
});

/** Where files are kept; 409 `no_artifact_store` where the control plane has none (Workers without a bucket). */
export function fileStore(ctx: FilesCtx): ObjectStore {
  if (!ctx.objects) throw new ApiError('no_artifact_store', 'this control plane has no artifact store to keep files in (on Workers there is none yet)');
  return ctx.objects;
}

/** A workspace's live file, or 404: another workspace's, a deleted one and an id that is no file id alike. */
async function findFile(ctx: ServiceCtx, input: { workspaceId: string; fileId: string; lock?: boolean }): Promise<FileRow> {
  const query = ctx.db
    .select()
    .from(files)
    .where(and(eq(files.id, input.fileId), eq(files.workspaceId, input.workspaceId), isNull(files.deletedAt)));
  const [row] = isId('file', input.fileId) ? await (input.lock ? query.for('update') : query) : [];
  if (!row) throw new ApiError('not_found', isId('file', input.fileId) ? `No such File object: ${input.fileId}` : 'No such File object: not a file id');
  return row;
}

/**
 * Streams `body` into the artifact store as a new file's bytes, at most `filesMaxBytes` of them (413 beyond, and
 * nothing kept). An empty body is refused (400) and kept neither. Outside any transaction: an upload takes as long
 * as the client sends.
 */
export async function stageFileObject({
  ctx,
  input,
}: {
  ctx: FilesCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; body: ReadableStream<Uint8Array> };
}): Promise<StagedFile> {
  const store = fileStore(ctx);
  const id = newId('file');
  const key = fileDataKey(input.workspaceId, id);
  const maxBytes = ctx.config.filesMaxBytes;
  let stored: { size: number; sha256: string };
  try {
    stored = await store.putObject(key, input.body, { maxBytes });
  } catch (error) {
    if (error instanceof ObjectTooLargeError) throw new ApiError('payload_too_large', `the file exceeds ${maxBytes} bytes`);
    throw error;
  }
  const staged = { id, workspaceId: input.workspaceId, key, bytes: stored.size, sha256: stored.sha256 };
  if (staged.bytes === 0) {
    await discardFileObject({ ctx, input: staged });
    throw new ApiError('bad_request', 'the file is empty');
  }
  return staged;
}

/**
 * Removes a staged file's bytes that will not become a file (the request was refused after they were stored). Best
 * effort: an object left behind, the store being away, is never listed nor served, as no row names it.
 */
export async function discardFileObject({ ctx, input }: { ctx: FilesCtx; input: StagedFile }): Promise<void> {
  await fileStore(ctx)
    .deleteObject(input.key)
    .catch(() => {});
}

/** Makes staged bytes a file of their workspace, audited as `file.create`; refused (400), the bytes are discarded. */
export async function recordFile({
  ctx,
  input,
}: {
  ctx: FilesCtx;
  /** `expiresInS`: it expires so long after now (then it is deleted: `sweepExpiredFiles`); unset, never. */
  input: { staged: StagedFile; filename: string; purpose: FilePurpose; expiresInS?: number | null };
}): Promise<FileObject> {
  const { staged } = input;
  try {
    const filename = parseOr400(FileName, input.filename);
    const purpose = parseOr400(FilePurpose, input.purpose);
    return await withTransaction(ctx, async (tx) => {
      const [row] = await tx.db
        .insert(files)
        .values({
          id: staged.id,
          workspaceId: staged.workspaceId,
          filename,
          purpose,
          bytes: staged.bytes,
          sha256: staged.sha256,
          objectKey: staged.key,
          expiresAt: input.expiresInS ? sql`now() + make_interval(secs => ${input.expiresInS})` : null,
        })
        .returning();
      await audit(tx, {
        workspaceId: staged.workspaceId,
        action: 'file.create',
        target: staged.id,
        details: { purpose, bytes: staged.bytes, sha256: staged.sha256 },
      });
      return fileObject(row!);
    });
  } catch (error) {
    await discardFileObject({ ctx, input: staged });
    throw error;
  }
}

/**
 * Creates a file from a stream, as batches write their output and error files (`batch_output`): the bytes go to
 * the artifact store, then the row is written. For callers inside the control plane; `POST /v1/files` stages and
 * records in two steps, as its purpose may arrive after its bytes.
 */
export async function createFile({
  ctx,
  input,
}: {
  ctx: FilesCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; filename: string; purpose: FilePurpose; body: ReadableStream<Uint8Array>; expiresInS?: number | null };
}): Promise<FileObject> {
  // Refused before a byte is stored when the name or purpose would be refused anyway.
  parseOr400(FileName, input.filename);
  parseOr400(FilePurpose, input.purpose);
  const staged = await stageFileObject({ ctx, input });
  return await recordFile({ ctx, input: { staged, filename: input.filename, purpose: input.purpose, expiresInS: input.expiresInS ?? null } });
}

/** One page of a workspace's live files, by id: the order they were created in (ids are time-ordered). */
export async function listFiles({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & FileListQuery }): Promise<FileList> {
  const ascending = input.order === 'asc';
  const rows = await ctx.db
    .select()
    .from(files)
    .where(
      and(
        eq(files.workspaceId, input.workspaceId),
        isNull(files.deletedAt),
        input.purpose === undefined ? undefined : eq(files.purpose, input.purpose),
        input.after === undefined ? undefined : ascending ? gt(files.id, input.after) : lt(files.id, input.after),
      ),
    )
    .orderBy(ascending ? asc(files.id) : desc(files.id))
    .limit(input.limit + 1);
  const data = rows.slice(0, input.limit).map(fileObject);
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: rows.length > input.limit };
}

export async function getFile({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; fileId: string } }): Promise<FileObject> {
  return fileObject(await findFile(ctx, input));
}

/** A file and its bytes, opened for reading: the caller streams or closes `content`. */
export async function openFileContent({
  ctx,
  input,
}: {
  ctx: FilesCtx;
  input: { workspaceId: string; fileId: string };
}): Promise<{ file: FileObject; content: OpenedFile }> {
  const store = fileStore(ctx);
  const row = await findFile(ctx, input);
  const content = await store.openObject(row.objectKey);
  if (!content) throw new ApiError('not_found', `the bytes of ${row.id} are missing from the artifact store`);
  return { file: fileObject(row), content };
}

/**
 * Deletes a file, audited as `file.delete`: its row is marked (and kept), its object deleted while the row is
 * locked, so that a store that fails the delete leaves the file whole and the delete can be retried.
 */
export async function deleteFile({ ctx, input }: { ctx: FilesCtx; input: { workspaceId: string; fileId: string } }): Promise<FileDeleted> {
  const store = fileStore(ctx);
  return await withTransaction(ctx, async (tx) => {
    const row = await findFile(tx, { ...input, lock: true });
    await tx.db.update(files).set({ deletedAt: sql`now()` }).where(eq(files.id, row.id));
    await store.deleteObject(row.objectKey);
    await audit(tx, { workspaceId: row.workspaceId, action: 'file.delete', target: row.id, details: { purpose: row.purpose, bytes: row.bytes } });
    return { id: row.id, object: 'file', deleted: true };
  });
}

/**
 * Deletes the live files whose expiry passed (`expires_after` at upload, or the retention of a job's data class:
 * docs/jobs.md, "Retention"), at most `limit` per call, oldest expiry first, each as `deleteFile` does (its object
 * deleted, its row marked), audited as `file.expire`. Returns how many it deleted.
 */
export async function sweepExpiredFiles({ ctx, input }: { ctx: FilesCtx; input: { limit: number } }): Promise<number> {
  const store = fileStore(ctx);
  const due = await ctx.db
    .select({ id: files.id })
    .from(files)
    .where(and(isNull(files.deletedAt), lt(files.expiresAt, sql`now()`)))
    .orderBy(asc(files.expiresAt))
    .limit(input.limit);
  let deleted = 0;
  for (const { id } of due) {
    deleted += await withTransaction(ctx, async (tx) => {
      const [row] = await tx.db
        .select()
        .from(files)
        .where(and(eq(files.id, id), isNull(files.deletedAt), lt(files.expiresAt, sql`now()`)))
        .for('update', { skipLocked: true });
      if (!row) return 0;
      await tx.db.update(files).set({ deletedAt: sql`now()` }).where(eq(files.id, row.id));
      await store.deleteObject(row.objectKey);
      await audit(tx, { workspaceId: row.workspaceId, action: 'file.expire', target: row.id, details: { purpose: row.purpose, bytes: row.bytes } });
      return 1;
    });
  }
  return deleted;
}

/**
 * Keeps a file no longer than `days` from now: its expiry moves earlier when it is later or unset, never later. A
 * job's input takes its data class's retention so (docs/jobs.md, "Retention").
 */
export async function expireFileWithin(tx: ServiceCtx, input: { fileId: string; days: number }): Promise<void> {
  await tx.db
    .update(files)
    .set({ expiresAt: sql`least(coalesce(${files.expiresAt}, 'infinity'::timestamptz), now() + make_interval(days => ${input.days}))` })
    .where(eq(files.id, input.fileId));
}
