import { open, realpath, stat, type FileHandle } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { Readable } from 'node:stream';
import type { ManifestFile } from '../../../shared/contracts/registry.js';
import {
  compareFile,
  digestOf,
  unreadFile,
  verifyEach,
  type ArtifactStore,
  type FileCheck,
  type FolderReport,
  type OpenedFile,
  type VersionFolder,
} from '../../kernel/ports/artifact-store.js';
import { localFileUrl } from './local-urls.js';

const codeOf = (error: unknown) => (error as { code?: unknown } | null)?.code;
export const isMissing = (error: unknown) => codeOf(error) === 'ENOENT' || codeOf(error) === 'ENOTDIR';

/** How the local store's URLs are made: the control plane's URL as agents reach it, and the signing key. */
export interface LocalUrlSigning {
  baseUrl: () => string;
  key: () => Promise<string>;
}

/**
 * The local artifact store: a version's files under `<root>/<workspace id>/<model name>/<version>/<path>`
 * (docs/artifacts.md), served by the control plane itself at signed URLs (`local-urls.ts`). Files are streamed,
 * never held whole. A path is followed through its symlinks first and refused when it ends outside the version's
 * folder: the manifest's own rules already refuse `..` and absolute paths, and this catches a link that points
 * out of the folder.
 */
export function localArtifactStore(root: string, urls: LocalUrlSigning): ArtifactStore {
  /** The version's folder through its links (it may itself be a link, to a larger disk), or null when absent. */
  async function folderOf(version: VersionFolder): Promise<string | null> {
    try {
      return await realpath(join(root, version.workspaceId, version.model, version.version));
    } catch (error) {
      if (!isMissing(error)) throw error;
      return null;
    }
  }

  /** The file's real path when it is a regular file inside the folder, else why not. */
  async function resolveInside(folder: string, path: string): Promise<{ real: string } | { problem: 'outside_folder' | 'not_a_file' }> {
    const real = await realpath(join(folder, path));
    if (!real.startsWith(folder + sep)) return { problem: 'outside_folder' };
    // Checked before opening: opening a FIFO would wait for a writer that never comes.
    if (!(await stat(real)).isFile()) return { problem: 'not_a_file' };
    return { real };
  }

  /** A file the system would not let us read (permissions, a loop of links) is the folder's problem, not a 500. */
  async function check(folder: string, file: ManifestFile): Promise<FileCheck> {
    try {
      return await read(folder, file);
    } catch (error) {
      if (typeof codeOf(error) !== 'string') throw error;
      return { problem: unreadFile(file, isMissing(error) ? 'missing' : 'unreadable'), bytes: 0 };
    }
  }

  async function read(folder: string, file: ManifestFile): Promise<FileCheck> {
    const resolved = await resolveInside(folder, file.path);
    if ('problem' in resolved) return { problem: unreadFile(file, resolved.problem), bytes: 0 };
    const handle = await open(resolved.real, 'r');
    try {
      const { size: found } = await handle.stat();
      // A size that differs needs no hashing: the file cannot match.
      if (found !== file.size) return { problem: unreadFile(file, 'size_mismatch', found), bytes: 0 };
      const actual = await digestOf(handle.createReadStream({ autoClose: false, highWaterMark: 1 << 20 }));
      return { problem: compareFile(file, actual), bytes: actual.size };
    } finally {
      await handle.close();
    }
  }

  return {
    async verify(version: VersionFolder, files: readonly ManifestFile[]): Promise<FolderReport> {
      const folder = await folderOf(version);
      if (folder === null) return { files: files.length, bytes: 0, problems: files.map((file) => unreadFile(file, 'missing')) };
      return await verifyEach(files, (file) => check(folder, file));
    },

    async fileUrl(folder: VersionFolder, path: string, expiresAt: number): Promise<string> {
      return localFileUrl({ baseUrl: urls.baseUrl(), key: await urls.key(), folder, path, exp: expiresAt });
    },

    async open(version: VersionFolder, path: string): Promise<OpenedFile | null> {
      const folder = await folderOf(version);
      if (folder === null) return null;
      let handle: FileHandle;
      try {
        const resolved = await resolveInside(folder, path);
        if ('problem' in resolved) return null;
        handle = await open(resolved.real, 'r');
      } catch (error) {
        // Absent, unreadable, a loop of links: nothing this URL can serve.
        if (typeof codeOf(error) !== 'string') throw error;
        return null;
      }
      return await openedFile(handle);
    },
  };
}

/** An open file handed over for serving: its size now, then its bytes a range at a time. The handle is the caller's no more. */
export async function openedFile(handle: FileHandle): Promise<OpenedFile> {
  const { size } = await handle.stat().catch(async (error: unknown) => {
    await handle.close();
    throw error;
  });
  return {
    size,
    stream: (start, end) => Readable.toWeb(handle.createReadStream({ start, end, autoClose: true, highWaterMark: 1 << 20 })) as ReadableStream<Uint8Array>,
    close: () => handle.close(),
  };
}
