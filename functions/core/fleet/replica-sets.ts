import type { deployments } from '../../store/schema/index.js';
import { WorkspacePolicy } from '../../../shared/contracts/placement.js';
import type { TemplateFields } from '../registry/template.js';
import { replicaHash, resolveRuntime, type ResolvedRuntime, type RuntimeRegistry, type SecretEnvRefs } from '../registry/resolve.js';
import { runtimeName } from '../scheduler/policy.js';
import { policyRules } from '../scheduler/policy.js';
import type { DesiredDeployment } from './reconcile.js';
import { replicaSetId, type Track } from './tracks.js';
import { resolveCanary, resolveSource, versionArtifact, type CatalogVersion, type Resolution, type VersionCatalog } from './versions.js';

type DeploymentRow = typeof deployments.$inferSelect;

/** What a deployment's replica sets are resolved against: runtime templates, registry versions, workspace policies. */
export interface PlacementInputs {
  registry: RuntimeRegistry;
  versions: VersionCatalog;
  /** By workspace id; a workspace without one has the empty policy (no quota, no rules). */
  policies: ReadonlyMap<string, WorkspacePolicy>;
}

const NO_POLICY = WorkspacePolicy.parse({});

/** A replica as it resolves now: what is signed, its secrets, its digest. */
interface ReplicaTemplate {
  fields: TemplateFields;
  secretEnv: SecretEnvRefs;
  templateHash: string;
}

/** One replica set of a deployment: what the pure reconciler works on, and what its new replicas run. */
export interface ReplicaSet {
  track: Track;
  desired: DesiredDeployment;
  /** Null while its runtime or version does not resolve (the set is held). */
  template: ReplicaTemplate | null;
}

function replicaTemplate(row: DeploymentRow, runtime: ResolvedRuntime, version: CatalogVersion | null): ReplicaTemplate {
  const fields: TemplateFields = {
    model: row.model,
    runtime: runtime.runtime,
    artifact: row.artifact ?? null,
    // Memory per GPU only when asked for: the digest of replicas that never asked stays what it was.
    resources: { gpus: row.gpus, memoryMiB: row.memoryMiB, ...(row.gpuMemoryMiB > 0 ? { gpuMemoryMiB: row.gpuMemoryMiB } : {}) },
    ...(version ? { version: versionArtifact(version) } : {}),
  };
  return { fields, secretEnv: runtime.secretEnv, templateHash: replicaHash(fields, runtime.secretEnv) };
}

/**
 * A deployment's replica sets (docs/scheduler.md): the stable set of the version its source resolves to, and, while
 * it has a canary of another version, the canary set on machines matching both selectors. A canary naming the
 * stable version is no canary. A deployment asleep (scaled to zero) wants no replica in either. A set whose runtime,
 * version or data class does not resolve is held with the reason, its replicas kept as they are. Pure.
 */
export function replicaSets(row: DeploymentRow, inputs: PlacementInputs): ReplicaSet[] {
  const policy = inputs.policies.get(row.workspaceId) ?? NO_POLICY;
  const runtime = resolveRuntime({ workspaceId: row.workspaceId, runtime: row.runtime, registry: inputs.registry });
  const runtimeHold = runtime.ok ? null : `runtime does not resolve: ${runtime.issues[0]?.message ?? runtime.code}`;
  const wanted = (replicas: number) => (row.asleepSince !== null ? 0 : replicas);
  const set = (track: Track, version: Resolution | null, replicas: number, selector: Record<string, string>): ReplicaSet => {
    const resolved = version?.ok ? version.version : null;
    const rules = policyRules(policy, { dataClass: row.dataClass, runtime: runtimeName(row.runtime), licence: resolved?.licence ?? null });
    const versionHold = version && !version.ok ? version.reason : null;
    const template = runtime.ok && versionHold === null ? replicaTemplate(row, runtime.value, resolved) : null;
    return {
      track,
      template,
      desired: {
        id: replicaSetId(row.id, track),
        model: row.model,
        generation: row.generation,
        templateHash: template?.templateHash ?? '',
        replicas: wanted(replicas),
        selector,
        gpus: row.gpus,
        gpuMemoryMiB: row.gpuMemoryMiB,
        memoryMiB: row.memoryMiB,
        replicasPerMachine: row.replicasPerMachine,
        versionId: resolved?.id ?? null,
        constraints: rules.constraints,
        hold: runtimeHold ?? versionHold ?? rules.refusal,
        rollout: row.rollout,
        deleted: row.deletedAt !== null,
      },
    };
  };
  const stable = row.source === null ? null : resolveSource(row.workspaceId, row.source, inputs.versions);
  const sets = [set('stable', stable, row.replicas, row.selector)];
  if (row.canary === null || row.deletedAt !== null) return sets;
  const canary: Resolution =
    stable === null
      ? { ok: false, reason: 'a canary needs a source' }
      : stable.ok
        ? resolveCanary(stable.version, row.canary.version, inputs.versions)
        : stable;
  if (canary.ok && stable?.ok && canary.version.id === stable.version.id) return sets;
  return [...sets, set('canary', canary, row.canary.replicas, { ...row.selector, ...row.canary.selector })];
}
