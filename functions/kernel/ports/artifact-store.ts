import { createHash } from 'node:crypto';
import type { FileProblem, ManifestFile } from '../../../shared/contracts/registry.js';

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

/** One file of a version, opened for the control plane to serve: its size, and its bytes a range at a time. */
export interface OpenedFile {
  size: number;
  /** The bytes `start..end` (inclusive) as a stream that closes the file when it ends or is cancelled. */
  stream(start: number, end: number): ReadableStream<Uint8Array>;
  /** Closes the file without reading it (a HEAD, a refused range). */
  close(): Promise<void>;
}

/**
 * Where model artifacts live (docs/design.md section 3, "Artifact store"; docs/artifacts.md): a local directory
 * that the control plane serves itself (`local-artifacts.ts`), or an S3-compatible bucket (`s3-artifacts.ts`).
 * Both lay a version out as `<workspace id>/<model name>/<version>/<path>` (`fileKey`).
 */
export interface ArtifactStore {
  /** Reads every manifest file of the folder through SHA-256, checking its size and digest. */
  verify(folder: VersionFolder, files: readonly ManifestFile[]): Promise<FolderReport>;
  /**
   * A GET URL for one file of the folder that an agent can use without any other credential, until `expiresAt`
   * (epoch seconds) and not after. `path` is a manifest path (already checked against its rules).
   */
  fileUrl(folder: VersionFolder, path: string, expiresAt: number): Promise<string>;
  /**
   * Only a store whose URLs point at the control plane itself (the local one): opens one file for its URL route,
   * or null when there is no such regular file inside the version's folder.
   */
  open?(folder: VersionFolder, path: string): Promise<OpenedFile | null>;
}

/** Whether a version's files can be handed to agents at all: false where the control plane has no store (Workers without S3). */
export function servesFiles(store: ArtifactStore | null | undefined): store is ArtifactStore {
  return store !== null && store !== undefined;
}

/** Where a file of a version lives in a store, relative to its root (or bucket prefix): `<workspace>/<model>/<version>/<path>`. */
export function fileKey(folder: VersionFolder, path: string): string {
  return `${folder.workspaceId}/${folder.model}/${folder.version}/${path}`;
}

/** What a file that was read whole says against its manifest entry: null when size and digest both match. */
export function compareFile(expected: ManifestFile, actual: { size: number; sha256: string }): FileProblem | null {
  if (actual.size !== expected.size)
    return { path: expected.path, problem: 'size_mismatch', expectedSize: expected.size, actualSize: actual.size, actualSha256: actual.sha256 };
  if (actual.sha256 !== expected.sha256)
    return { path: expected.path, problem: 'digest_mismatch', expectedSize: expected.size, actualSize: actual.size, actualSha256: actual.sha256 };
  return null;
}

/** What reading one file found: its problem (null when it matches) and how many bytes were hashed. */
export interface FileCheck {
  problem: FileProblem | null;
  bytes: number;
}

/** Checks the files one after another (a store's reads are large and sequential), reporting every problem. */
export async function verifyEach(files: readonly ManifestFile[], check: (file: ManifestFile) => Promise<FileCheck>): Promise<FolderReport> {
  const problems: FileProblem[] = [];
  let bytes = 0;
  for (const file of files) {
    const result = await check(file);
    bytes += result.bytes;
    if (result.problem) problems.push(result.problem);
  }
  return { files: files.length, bytes, problems };
}

/** Size and SHA-256 of a file read as a stream of chunks, never held whole. */
export async function digestOf(chunks: AsyncIterable<Uint8Array>): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of chunks) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { size, sha256: hash.digest('hex') };
}

/** A file that could not be read to the end (absent, the wrong size, out of bounds): no digest to report. */
export function unreadFile(file: ManifestFile, problem: FileProblem['problem'], actualSize: number | null = null): FileProblem {
  return { path: file.path, problem, expectedSize: file.size, actualSize, actualSha256: null };
}
