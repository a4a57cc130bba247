import { join } from 'node:path';
import type { VersionArtifact } from '../../shared/contracts/artifacts.js';
import { duplicatePaths, manifestPathProblem } from '../../shared/manifest.js';

/**
 * Where the cache keeps what (docs/agent-cache.md): verified files by digest in `blobs/`, downloads in progress
 * in `partial/`, each version's folder of hard links in `versions/`, and the last-use index.
 */
export function cacheLayout(dir: string) {
  return {
    dir,
    blobs: join(dir, 'blobs'),
    partials: join(dir, 'partial'),
    versions: join(dir, 'versions'),
    index: join(dir, 'index.json'),
    blob: (sha256: string) => join(dir, 'blobs', sha256),
    partial: (sha256: string) => join(dir, 'partial', sha256),
    version: (versionId: string) => join(dir, 'versions', versionId),
  };
}
export type CacheLayout = ReturnType<typeof cacheLayout>;

/** A version id names a folder of `versions/`: one plain segment, as the control plane's `mv_...` ids are. */
const VERSION_ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * What is wrong with a version's files as this node would lay them out, or null. The control plane checked the
 * manifest before it was stored; the node checks again, since a path is about to become a file on its disk: no
 * path may leave the version's folder, name a file twice, or be a file and a folder at once. Pure.
 */
export function versionProblem(version: VersionArtifact): string | null {
  if (!VERSION_ID.test(version.versionId)) return `version id ${JSON.stringify(version.versionId.slice(0, 80))} is not a plain name`;
  for (const file of version.files) {
    const problem = manifestPathProblem(file.path);
    if (problem !== null) return `version ${version.versionId}: file ${JSON.stringify(file.path.slice(0, 200))}: ${problem}`;
  }
  const paths = version.files.map((file) => file.path);
  const repeated = duplicatePaths(paths);
  if (repeated.length > 0) return `version ${version.versionId}: file ${repeated[0]} is named twice`;
  const files = new Set(paths);
  for (const path of paths) {
    // 'a' and 'a/b' cannot both be: one would have to be a file and a folder.
    for (let cut = path.indexOf('/'); cut !== -1; cut = path.indexOf('/', cut + 1)) {
      const folder = path.slice(0, cut);
      if (files.has(folder)) return `version ${version.versionId}: ${folder} is a file and the folder of ${path}`;
    }
  }
  return null;
}

/** The version's distinct blobs (two files with the same bytes share one), by digest, with their size. Pure. */
export function versionBlobs(version: Pick<VersionArtifact, 'files'>): Map<string, number> {
  return new Map(version.files.map((file) => [file.sha256, file.size]));
}

/** A size for messages: in GiB with two decimals, or in bytes when that would read as 0.00 GiB. Pure. */
export function sizeText(bytes: number): string {
  return bytes >= 0.005 * 1024 ** 3 || bytes === 0 ? `${(bytes / 1024 ** 3).toFixed(2)} GiB` : `${bytes} bytes`;
}
