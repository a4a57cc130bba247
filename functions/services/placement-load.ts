import { and, eq, inArray, isNull, sql, type SQL } from 'drizzle-orm';
import { type deployments, modelAliases, models, modelVersions, workspaces } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { loadRuntimeRegistry } from './runtime-registry.js';
import { EMPTY_REGISTRY } from '../core/registry/resolve.js';
import { catalogOf, EMPTY_CATALOG, type CatalogVersion, type VersionCatalog } from '../core/fleet/versions.js';
import type { PlacementInputs } from '../core/fleet/replica-sets.js';

type DeploymentRow = typeof deployments.$inferSelect;

const versionColumns = {
  id: modelVersions.id,
  workspaceId: modelVersions.workspaceId,
  model: models.name,
  version: modelVersions.version,
  state: modelVersions.state,
  licence: modelVersions.licence,
  totalBytes: modelVersions.totalBytes,
  manifest: modelVersions.manifest,
};

const tuples = (rows: ReadonlyArray<readonly string[]>): SQL =>
  sql.join(
    rows.map(
      (r) =>
        sql`(${sql.join(
          r.map((v) => sql`${v}`),
          sql`, `,
        )})`,
    ),
    sql`, `,
  );
const unique = <T extends readonly string[]>(rows: T[]): T[] => [...new Map(rows.map((r) => [r.join('\u0000'), r])).values()];

/**
 * The registry versions the given deployments name, in two queries whatever their number: the aliases they follow
 * (with the versions they point at), then the versions they name by label, their canaries' included (a canary is
 * another version of its source's model, known once the alias is read).
 */
async function loadVersionCatalog(db: Db, rows: readonly DeploymentRow[]): Promise<VersionCatalog> {
  const sourced = rows.filter((d) => d.source !== null);
  if (sourced.length === 0) return EMPTY_CATALOG;
  const toVersion = (v: Omit<CatalogVersion, 'files'> & { manifest: { files: CatalogVersion['files'] } }): CatalogVersion => ({
    id: v.id,
    workspaceId: v.workspaceId,
    model: v.model,
    version: v.version,
    state: v.state,
    licence: v.licence,
    totalBytes: v.totalBytes,
    files: v.manifest.files,
  });
  const aliasPairs = unique(sourced.flatMap((d) => (d.source!.kind === 'alias' ? [[d.workspaceId, d.source!.alias] as const] : [])));
  const aliased = aliasPairs.length
    ? await db
        .select({ aliasName: modelAliases.name, ...versionColumns })
        .from(modelAliases)
        .innerJoin(modelVersions, eq(modelVersions.id, modelAliases.versionId))
        .innerJoin(models, eq(models.id, modelVersions.modelId))
        .where(sql`(${modelAliases.workspaceId}, ${modelAliases.name}) in (${tuples(aliasPairs)})`)
    : [];
  const aliasModel = new Map(aliased.map((a) => [`${a.workspaceId}\u0000${a.aliasName}`, a.model]));
  const labelTriples = unique(
    sourced.flatMap((d) => {
      const source = d.source!;
      const model = source.kind === 'version' ? source.model : aliasModel.get(`${d.workspaceId}\u0000${source.alias}`);
      if (model === undefined) return [];
      const labels = [...(source.kind === 'version' ? [source.version] : []), ...(d.canary ? [d.canary.version] : [])];
      return labels.map((label) => [d.workspaceId, model, label] as const);
    }),
  );
  const labelled = labelTriples.length
    ? await db
        .select(versionColumns)
        .from(modelVersions)
        .innerJoin(models, eq(models.id, modelVersions.modelId))
        .where(and(isNull(models.deletedAt), sql`(${models.workspaceId}, ${models.name}, ${modelVersions.version}) in (${tuples(labelTriples)})`))
    : [];
  return catalogOf({
    aliases: aliased.map((a) => ({ workspaceId: a.workspaceId, name: a.aliasName, versionId: a.id })),
    versions: [...aliased, ...labelled].map(toVersion),
  });
}

/** The placement policies of the given workspaces, defaults filled in. */
async function loadPolicies(db: Db, workspaceIds: readonly string[]): Promise<Map<string, WorkspacePolicy>> {
  if (workspaceIds.length === 0) return new Map();
  const rows = await db
    .select({ id: workspaces.id, policy: workspaces.policy })
    .from(workspaces)
    .where(inArray(workspaces.id, [...workspaceIds]));
  return new Map(rows.map((r) => [r.id, WorkspacePolicy.parse(r.policy)]));
}

/**
 * What the given deployments' replica sets resolve against, read once: runtime templates and secret versions
 * (only when one runs a template), the registry versions they name, and their workspaces' policies.
 */
export async function loadPlacementInputs(db: Db, rows: readonly DeploymentRow[], scope: { workspaceId?: string } = {}): Promise<PlacementInputs> {
  const registry = rows.some((d) => d.runtime.kind === 'template') ? await loadRuntimeRegistry(db, scope) : EMPTY_REGISTRY;
  const versions = await loadVersionCatalog(db, rows);
  const policies = await loadPolicies(db, scope.workspaceId ? [scope.workspaceId] : [...new Set(rows.map((d) => d.workspaceId))]);
  return { registry, versions, policies };
}
