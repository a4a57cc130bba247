import { randomUUID } from 'node:crypto';
import { and, eq, gt, sql } from 'drizzle-orm';
import { runtimeSecrets } from '../store/schema/index.js';
import type { RuntimeSecretView, SecretFeed } from '../../shared/contracts/runtime-template.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import { ApiError } from '../kernel/errors.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { liveTemplateDeployments } from './runtime-registry.js';
import { secretAssociatedData, secretBox, type SecretBox } from '../core/registry/secret-box.js';

type SecretRow = typeof runtimeSecrets.$inferSelect;

/** Names, feeds and times only: no API answer ever carries a secret's value or its ciphertext. */
function secretView(row: Pick<SecretRow, 'name' | 'feeds' | 'createdAt' | 'updatedAt'>): RuntimeSecretView {
  return { name: row.name, feeds: row.feeds, createdAt: row.createdAt.toISOString(), updatedAt: row.updatedAt.toISOString() };
}

/** A feeds list in one order, without repeats: what is stored and compared. */
function normalFeeds(feeds: readonly SecretFeed[]): SecretFeed[] {
  const unique = new Map(feeds.map((f) => [`${f.template}\u0000${f.env}`, { template: f.template, env: f.env }]));
  return [...unique.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, feed]) => feed);
}

/** The configured secret box, or 503 naming the setting (never any key material). */
export function requireSecretBox(config: Pick<ControlPlaneConfig, 'secretKey'>): SecretBox {
  if (!config.secretKey) throw new ApiError('unavailable', 'runtime secrets need a secret key: set LUNANEXA_SECRET_KEY (base64 of 32 bytes)');
  return secretBox(config.secretKey);
}

/** One page of the runtime secrets of a workspace, by name (unique in a workspace: the key). */
export async function listRuntimeSecrets({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string } & PageRequest<string>;
}): Promise<RowPage<RuntimeSecretView>> {
  const rows = await ctx.db
    .select({ name: runtimeSecrets.name, feeds: runtimeSecrets.feeds, createdAt: runtimeSecrets.createdAt, updatedAt: runtimeSecrets.updatedAt })
    .from(runtimeSecrets)
    .where(and(eq(runtimeSecrets.workspaceId, input.workspaceId), input.after !== undefined ? gt(runtimeSecrets.name, input.after) : undefined))
    .orderBy(runtimeSecrets.name)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: page.items.map(secretView), more: page.more };
}

/**
 * Writes a runtime secret (admins only, at the route), sealed under the secret key, and what it may feed: the
 * (template, env name) pairs listed in `feeds` (none for a new secret written without; an existing one keeps its
 * list when `feeds` is left out). A new value gets a new version, which rolls the replicas that use it; a new
 * list applies at the next reconcile (a deployment it no longer lists stops rendering and receives the value no
 * more). Every write is one, whatever was stored: sealed anew, `updatedAt` moved and audited as a rotation, so that
 * neither the answer nor the audit log tells the writer whether a value it sent equals the stored one (a guess
 * oracle); only the replicas, which roll on a new value alone, show it, and a wrong guess has then replaced the secret.
 */
export async function putRuntimeSecret({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config' | 'afterWrite'>;
  input: { workspaceId: string; name: string; value: string; feeds?: readonly SecretFeed[] };
}): Promise<RuntimeSecretView> {
  const box = requireSecretBox(ctx.config);
  if (input.value.includes('\0'))
    throw new ApiError('validation_failed', 'a runtime secret must not contain NUL at value', [{ path: 'value', message: 'must not contain NUL' }]);
  const aad = secretAssociatedData(input.workspaceId, input.name);
  const written = await withTransaction(ctx, async (tx) => {
    const where = and(eq(runtimeSecrets.workspaceId, input.workspaceId), eq(runtimeSecrets.name, input.name));
    const [existing] = await tx.db.select().from(runtimeSecrets).where(where).for('update');
    const feeds = input.feeds !== undefined ? normalFeeds(input.feeds) : (existing?.feeds ?? []);
    const sameValue = existing !== undefined && box.open(existing.sealed, aad) === input.value;
    // The version (which rolls replicas) changes with the value only.
    const sealed = { sealed: box.seal(input.value, aad), keyId: box.keyId, version: sameValue ? existing.version : randomUUID() };
    const [row] = existing
      ? await tx.db
          .update(runtimeSecrets)
          .set({ ...sealed, feeds, updatedAt: sql`now()` })
          .where(where)
          .returning()
      : await tx.db
          .insert(runtimeSecrets)
          .values({ workspaceId: input.workspaceId, name: input.name, ...sealed, feeds })
          .returning();
    // The name, which key sealed it and what it feeds; never the value, its length or its ciphertext.
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: existing ? 'runtime_secret.rotate' : 'runtime_secret.create',
      target: input.name,
      details: { keyId: box.keyId, feeds },
    });
    return secretView(row!);
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/** The live deployments whose environment takes `name`. */
async function deploymentsUsingSecret(ctx: ServiceCtx, workspaceId: string, name: string): Promise<string[]> {
  return (await liveTemplateDeployments(ctx.db, workspaceId))
    .filter((d) => Object.values(d.runtime.env).some((v) => 'secret' in v && v.secret === name))
    .map((d) => d.name);
}

/** Removes a runtime secret; 409 while a live deployment's environment names it, 404 when there is none. */
export async function deleteRuntimeSecret({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string } }): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const where = and(eq(runtimeSecrets.workspaceId, input.workspaceId), eq(runtimeSecrets.name, input.name));
    const [existing] = await tx.db.select({ name: runtimeSecrets.name }).from(runtimeSecrets).where(where).for('update');
    if (!existing) throw new ApiError('not_found', `runtime secret ${input.name} not found`);
    const users = await deploymentsUsingSecret(tx, input.workspaceId, input.name);
    if (users.length) throw new ApiError('conflict', `runtime secret ${input.name} is used by deployment ${users.join(', ')}`, { deployments: users });
    await tx.db.delete(runtimeSecrets).where(where);
    await audit(tx, { workspaceId: input.workspaceId, action: 'runtime_secret.delete', target: input.name });
  });
}
