import { createHash } from 'node:crypto';
import { open, realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import type { FileProblem, ManifestFile } from '../../shared/contracts/registry.js';
import { compareFile, type ArtifactStore, type FolderReport, type VersionFolder } from './artifact-store.js';

const codeOf = (error: unknown) => (error as { code?: unknown } | null)?.code;
const isMissing = (error: unknown) => codeOf(error) === 'ENOENT' || codeOf(error) === 'ENOTDIR';

const unread = (file: ManifestFile, problem: FileProblem['problem'], actualSize: number | null = null): FileProblem => ({
  path: file.path,
  problem,
  expectedSize: file.size,
  actualSize,
  actualSha256: null,
});

/**
 * The local artifact store: a version's files under `<root>/<workspace id>/<model name>/<version>/<path>`
 * (docs/registry.md, "The local store"). Files are streamed through SHA-256, never held whole. A path is
 * followed through its symlinks first and refused when it ends outside the version's folder: the manifest's
 * own rules already refuse `..` and absolute paths, and this catches a link that points out of the folder.
 */
export function localArtifactStore(root: string): ArtifactStore {
  /** A file the system would not let us read (permissions, a loop of links) is the folder's problem, not a 500. */
  async function check(folder: string, file: ManifestFile): Promise<{ problem: FileProblem | null; bytes: number }> {
    try {
      return await read(folder, file);
    } catch (error) {
      if (typeof codeOf(error) !== 'string') throw error;
      return { problem: unread(file, isMissing(error) ? 'missing' : 'unreadable'), bytes: 0 };
    }
  }

  async function read(folder: string, file: ManifestFile): Promise<{ problem: FileProblem | null; bytes: number }> {
    const real = await realpath(join(folder, file.path));
    if (!real.startsWith(folder + sep)) return { problem: unread(file, 'outside_folder'), bytes: 0 };
    // Checked before opening: opening a FIFO would wait for a writer that never comes.
    if (!(await stat(real)).isFile()) return { problem: unread(file, 'not_a_file'), bytes: 0 };
    const handle = await open(real, 'r');
    try {
      const { size: found } = await handle.stat();
      // A size that differs needs no hashing: the file cannot match.
      if (found !== file.size) return { problem: unread(file, 'size_mismatch', found), bytes: 0 };
      const hash = createHash('sha256');
      let size = 0;
      for await (const chunk of handle.createReadStream({ autoClose: false, highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
        hash.update(chunk);
        size += chunk.length;
      }
      return { problem: compareFile(file, { size, sha256: hash.digest('hex') }), bytes: size };
    } finally {
      await handle.close();
    }
  }

  return {
    async verify(version: VersionFolder, files: readonly ManifestFile[]): Promise<FolderReport> {
      let folder: string;
      try {
        folder = await realpath(join(root, version.workspaceId, version.model, version.version));
      } catch (error) {
        if (!isMissing(error)) throw error;
        return { files: files.length, bytes: 0, problems: files.map((file) => unread(file, 'missing')) };
      }
      const problems: FileProblem[] = [];
      let bytes = 0;
      for (const file of files) {
        const result = await check(folder, file);
        bytes += result.bytes;
        if (result.problem) problems.push(result.problem);
      }
      return { files: files.length, bytes, problems };
    },
  };
}
