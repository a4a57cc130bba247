import { and, eq } from 'drizzle-orm';
import { modelAliases, models, modelVersions } from '../store/schema/index.js';
import type { CanarySpec, DeploymentRuntime, ModelSource } from '../../shared/contracts/deployment.js';
import type { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { ApiError } from '../kernel/errors.js';
import type { ServiceCtx } from './service-context.js';
import { aliasable } from '../core/registry/lifecycle.js';
import { findVersion } from './models.js';
import { moveVersion, type VersionRow } from './version-moves.js';
import { runtimeName } from '../core/scheduler/policy.js';

const invalid = (path: string, message: string) => new ApiError('validation_failed', `${message} (at ${path})`, { issues: [{ path, message }] });

/** The version a source names now, locked for the caller's transaction; a source that names nothing: 400. */
async function sourceVersion(tx: ServiceCtx, workspaceId: string, source: ModelSource): Promise<{ row: VersionRow; model: string }> {
  if (source.kind === 'version') {
    const row = await findVersion(tx, { workspaceId, model: source.model, version: source.version, lock: true }).catch((error: unknown) => {
      if (error instanceof ApiError && error.code === 'not_found') throw invalid('source', error.message);
      throw error;
    });
    return { row, model: source.model };
  }
  const [found] = await tx.db
    .select({ row: modelVersions, model: models.name })
    .from(modelAliases)
    .innerJoin(modelVersions, eq(modelVersions.id, modelAliases.versionId))
    .innerJoin(models, eq(models.id, modelVersions.modelId))
    .where(and(eq(modelAliases.workspaceId, workspaceId), eq(modelAliases.name, source.alias)))
    .for('update', { of: modelVersions });
  if (!found) throw invalid('source.alias', `alias ${source.alias} not found`);
  return found;
}

/**
 * Checks what a deployment serves against the registry and its workspace's policy, in the apply's transaction:
 * its source resolves to a version that may serve (approved or further on, never rolled back), its canary is another
 * such version of the same model, and its data class is one the policy lists for its runtime. A canary whose version
 * is approved starts here: the version moves to `canary`, audited with the token that applied the deployment.
 */
export async function checkDeploymentSource(
  tx: ServiceCtx,
  input: {
    workspaceId: string;
    name: string;
    source: ModelSource | null;
    canary: CanarySpec | null;
    dataClass: string | null;
    runtime: DeploymentRuntime;
    policy: WorkspacePolicy;
  },
): Promise<void> {
  if (input.dataClass !== null) {
    const rule = Object.hasOwn(input.policy.dataClasses, input.dataClass) ? input.policy.dataClasses[input.dataClass] : undefined;
    if (!rule) throw invalid('dataClass', `data class ${input.dataClass} is not in the workspace's policy`);
    const runtime = runtimeName(input.runtime);
    if (rule.runtimes !== null && !rule.runtimes.includes(runtime)) throw invalid('runtime', `data class ${input.dataClass} may not run on runtime ${runtime}`);
  }
  if (input.source === null) return;
  const stable = await sourceVersion(tx, input.workspaceId, input.source);
  if (!aliasable(stable.row.state)) {
    throw new ApiError('invalid_transition', `a deployment serves only an approved version: ${stable.model} ${stable.row.version} is ${stable.row.state}`, {
      state: stable.row.state,
    });
  }
  if (input.canary === null) return;
  const canary = await findVersion(tx, { workspaceId: input.workspaceId, model: stable.model, version: input.canary.version, lock: true }).catch(
    (error: unknown) => {
      if (error instanceof ApiError && error.code === 'not_found') throw invalid('canary.version', error.message);
      throw error;
    },
  );
  if (canary.id === stable.row.id) throw invalid('canary.version', `${stable.model} ${canary.version} is already what the deployment serves`);
  if (canary.state === 'approved') {
    await moveVersion(
      tx,
      { workspaceId: input.workspaceId, model: stable.model, version: canary.version },
      canary,
      { type: 'start_canary', actor: tx.actor },
      { details: { deployment: input.name, weight: input.canary.weight } },
    );
  } else if (canary.state !== 'canary' && canary.state !== 'gated') {
    throw new ApiError('invalid_transition', `a canary runs an approved version not yet promoted: ${stable.model} ${canary.version} is ${canary.state}`, {
      state: canary.state,
    });
  }
}
