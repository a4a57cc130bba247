import type { ModelSource } from '../../../shared/contracts/deployment.js';
import type { VersionArtifact } from '../../../shared/contracts/artifacts.js';
import type { ManifestFile, VersionState } from '../../../shared/contracts/registry.js';
import { aliasable } from '../registry/lifecycle.js';

/** A model version as the controller reads it: enough to resolve sources, pick machines and sign assignments. */
export interface CatalogVersion {
  id: string;
  workspaceId: string;
  model: string;
  version: string;
  state: VersionState;
  licence: string | null;
  totalBytes: number;
  files: readonly ManifestFile[];
}

/** The registry versions and aliases the live deployments name, read once per pass. */
export interface VersionCatalog {
  alias(workspaceId: string, name: string): CatalogVersion | undefined;
  version(workspaceId: string, model: string, label: string): CatalogVersion | undefined;
}

export const EMPTY_CATALOG: VersionCatalog = { alias: () => undefined, version: () => undefined };

/** A catalog over rows already read. */
export function catalogOf(rows: {
  aliases: ReadonlyArray<{ workspaceId: string; name: string; versionId: string }>;
  versions: readonly CatalogVersion[];
}): VersionCatalog {
  const key = (...parts: string[]) => parts.join('\u0000');
  const byId = new Map(rows.versions.map((v) => [v.id, v]));
  const byLabel = new Map(rows.versions.map((v) => [key(v.workspaceId, v.model, v.version), v]));
  const aliases = new Map(rows.aliases.map((a) => [key(a.workspaceId, a.name), a.versionId]));
  return {
    alias: (workspaceId, name) => byId.get(aliases.get(key(workspaceId, name)) ?? ''),
    version: (workspaceId, model, label) => byLabel.get(key(workspaceId, model, label)),
  };
}

export type Resolution = { ok: true; version: CatalogVersion } | { ok: false; reason: string };

/** Only a version approved or further on, and neither rolled back nor rejected, may serve (`aliasable`). */
function servable(version: CatalogVersion | undefined, what: string): Resolution {
  if (!version) return { ok: false, reason: `${what} not found` };
  if (!aliasable(version.state)) return { ok: false, reason: `${what} is ${version.state}: only an approved version serves` };
  return { ok: true, version };
}

/** The version a deployment's source names now, in its workspace, or why none may serve. Pure. */
export function resolveSource(workspaceId: string, source: ModelSource, catalog: VersionCatalog): Resolution {
  if (source.kind === 'version') return servable(catalog.version(workspaceId, source.model, source.version), `version ${source.model} ${source.version}`);
  const target = catalog.alias(workspaceId, source.alias);
  if (!target) return { ok: false, reason: `alias ${source.alias} not found` };
  return servable(target, `alias ${source.alias} points at ${target.model} ${target.version}, which`);
}

/** The version a canary names: another version of the stable one's model. Pure. */
export function resolveCanary(stable: CatalogVersion, label: string, catalog: VersionCatalog): Resolution {
  return servable(catalog.version(stable.workspaceId, stable.model, label), `canary version ${stable.model} ${label}`);
}

/** The version as a stored assignment carries it: the manifest's files, their URLs left for signing to fill in. */
export function versionArtifact(version: CatalogVersion): VersionArtifact {
  return {
    versionId: version.id,
    model: version.model,
    version: version.version,
    totalBytes: version.totalBytes,
    files: version.files.map((f) => ({ path: f.path, size: f.size, sha256: f.sha256, url: '' })),
    urlsExpireAt: 0,
  };
}
