import type { FileProblem, ManifestFile } from '../../shared/contracts/registry.js';

/** Which version's folder: `<workspace id>/<model name>/<version>` of the store. */
export interface VersionFolder {
  workspaceId: string;
  model: string;
  version: string;
}

/** What a digest verification read, and what did not match the manifest (every file, not only the first). */
export interface FolderReport {
  files: number;
  bytes: number;
  problems: FileProblem[];
}

/**
 * Where model artifacts live (docs/design.md section 3, "Artifact store"): on Node a local directory
 * (`local-artifacts.ts`); on Workers none yet, and verification answers 409 `no_artifact_store`.
 */
export interface ArtifactStore {
  /** Reads every manifest file of the folder through SHA-256, checking its size and digest. */
  verify(folder: VersionFolder, files: readonly ManifestFile[]): Promise<FolderReport>;
}

/** What a file that was read whole says against its manifest entry: null when size and digest both match. */
export function compareFile(expected: ManifestFile, actual: { size: number; sha256: string }): FileProblem | null {
  if (actual.size !== expected.size) return { path: expected.path, problem: 'size_mismatch', expectedSize: expected.size, actualSize: actual.size, actualSha256: actual.sha256 };
  if (actual.sha256 !== expected.sha256) return { path: expected.path, problem: 'digest_mismatch', expectedSize: expected.size, actualSize: actual.size, actualSha256: actual.sha256 };
  return null;
}
