import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import type { Db } from '../store/db.js';
import { deployments, runtimeSecrets, runtimeTemplates } from '../store/schema/index.js';
import type { DeploymentRuntime } from '../../shared/contracts/deployment.js';
import { ApiError } from '../kernel/errors.js';
import { registryOf, resolveRuntime, type ResolveFailure, type RuntimeRegistry } from '../core/registry/resolve.js';

/** Every registered template and secret version (never a secret's value), for the reconciler. */
export async function loadRuntimeRegistry(db: Db, scope: { workspaceId?: string } = {}): Promise<RuntimeRegistry> {
  const [templates, secrets] = await Promise.all([
    db
      .select({ workspaceId: runtimeTemplates.workspaceId, name: runtimeTemplates.name, spec: runtimeTemplates.spec })
      .from(runtimeTemplates)
      .where(scope.workspaceId ? eq(runtimeTemplates.workspaceId, scope.workspaceId) : undefined),
    db
      .select({ workspaceId: runtimeSecrets.workspaceId, name: runtimeSecrets.name, version: runtimeSecrets.version, feeds: runtimeSecrets.feeds })
      .from(runtimeSecrets)
      .where(scope.workspaceId ? eq(runtimeSecrets.workspaceId, scope.workspaceId) : undefined),
  ]);
  return registryOf({ templates, secrets });
}

/** The live deployments of a workspace that run a template. */
export async function liveTemplateDeployments(db: Db, workspaceId: string) {
  const rows = await db
    .select({ id: deployments.id, name: deployments.name, runtime: deployments.runtime })
    .from(deployments)
    .where(and(eq(deployments.workspaceId, workspaceId), isNull(deployments.deletedAt), sql`${deployments.runtime}->>'kind' = 'template'`))
    .orderBy(deployments.name);
  return rows.flatMap((row) => (row.runtime.kind === 'template' ? [{ ...row, runtime: row.runtime }] : []));
}

/** The 400 a runtime that does not resolve is answered with: the first issue in the message, all in `details`. */
function resolveError(failure: ResolveFailure): ApiError {
  const first = failure.issues[0]!;
  return new ApiError(failure.code, `${first.message} at ${first.path}`, failure.issues);
}

/**
 * Checks, in the caller's transaction, that a deployment's runtime resolves against the registry: the template
 * exists, its params and env are valid, and the secrets it names exist and may feed the variables they are named
 * for (their `feeds`). The template and secret rows are read
 * `for share`, so a concurrent delete of either waits for this transaction and then sees the deployment.
 */
export async function requireResolvableRuntime(db: Db, input: { workspaceId: string; runtime: DeploymentRuntime }): Promise<void> {
  const { workspaceId, runtime } = input;
  if (runtime.kind !== 'template') return;
  const templates = await db
    .select({ workspaceId: runtimeTemplates.workspaceId, name: runtimeTemplates.name, spec: runtimeTemplates.spec })
    .from(runtimeTemplates)
    .where(and(eq(runtimeTemplates.workspaceId, workspaceId), eq(runtimeTemplates.name, runtime.template)))
    .for('share');
  const secretNames = [...new Set(Object.values(runtime.env).flatMap((v) => ('secret' in v ? [v.secret] : [])))];
  const secrets = secretNames.length
    ? await db
        .select({ workspaceId: runtimeSecrets.workspaceId, name: runtimeSecrets.name, version: runtimeSecrets.version, feeds: runtimeSecrets.feeds })
        .from(runtimeSecrets)
        .where(and(eq(runtimeSecrets.workspaceId, workspaceId), inArray(runtimeSecrets.name, secretNames)))
        .for('share')
    : [];
  const resolved = resolveRuntime({ workspaceId, runtime, registry: registryOf({ templates, secrets }) });
  if (!resolved.ok) throw resolveError(resolved);
}
