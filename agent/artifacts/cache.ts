import { randomUUID } from 'node:crypto';
import { constants } from 'node:fs';
import { link, lstat, mkdir, readdir, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Dispatcher } from 'undici';
import type { VersionArtifact } from '../../shared/contracts/artifacts.js';
import { assertCacheFile, cacheDirProblem, openCacheFile } from './cache-guard.js';
import { cachedVersionIds, loadIndex, saveIndex, type CacheIndex } from './cache-index.js';
import { fetchBlob } from './download.js';
import { planEviction } from './evict.js';
import { cacheLayout, versionBlobs, type CacheLayout } from './layout.js';
import { SharedWork } from './shared-work.js';

/** How far a prepare's download has come: bytes of its files in the cache against their total. */
export interface PullProgress {
  bytesDone: number;
  bytesTotal: number;
}

export interface ArtifactCacheOptions {
  dir: string;
  maxBytes: number;
  /** A download that receives no byte for this long fails. */
  stallMs: number;
  /** Versions of the current assignments: never evicted. */
  inUse: () => Iterable<string>;
  dispatcher: Dispatcher;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/** The heartbeat contract's bound on `cachedVersions`. */
const REPORTED_VERSIONS = 256;
/** Files of one version fetched at once: a few streams fill a link that one would not. */
const PARALLEL_FILES = 4;
/** Progress is passed on at most this often while bytes stream (a report reads it; nothing waits on it). */
const PROGRESS_EVERY_MS = 100;

const HEX = /^[0-9a-f]{64}$/;

/**
 * The node's content-addressed cache of model versions (docs/agent-cache.md): fetches a version's files from their
 * signed URLs into blobs named by digest (verified before they are kept; shared by versions with the same file),
 * lays the version out as a folder of hard links for the runtime's `{model_path}`, and keeps the whole within its
 * byte budget by evicting the least recently used versions that no current assignment needs. One fetch per version
 * and per blob at a time in this process, however many assignments wait for it.
 */
export class ArtifactCache {
  readonly layout: CacheLayout;
  private index: CacheIndex | null = null;
  private loading: Promise<CacheIndex> | null = null;
  /** Index changes and eviction, one at a time. */
  private serial: Promise<unknown> = Promise.resolve();
  private readonly versionWork = new SharedWork<string>();
  private readonly blobWork = new SharedWork<void>();
  /** Blobs each version's fetch will add, while it runs: other fetches plan their room around them. */
  private readonly reserved = new Map<string, Map<string, number>>();
  /** Bytes on disk of each blob being fetched. */
  private readonly blobBytes = new Map<string, number>();
  /** Who waits for each version's progress, and the latest of it (for a waiter that joins late). */
  private readonly watchers = new Map<string, { listeners: Set<(progress: PullProgress) => void>; latest: PullProgress | null }>();

  constructor(private readonly opts: ArtifactCacheOptions) {
    this.layout = cacheLayout(opts.dir);
  }

  /** The folder a version is laid out in (whether or not it is there yet). */
  folder(versionId: string): string {
    return this.layout.version(versionId);
  }

  /**
   * The version's folder, once every file is in the cache with its manifest's size and digest: fetched (resumed)
   * if need be, after making room. `onProgress` is called only when something is to be downloaded, first before
   * any byte is, last with every byte done. `signal` stops this caller's wait at once (and the fetch, when no other
   * caller waits for it).
   */
  async ensure(version: VersionArtifact, signal: AbortSignal, onProgress?: (progress: PullProgress) => void): Promise<string> {
    const watch = this.watchers.get(version.versionId) ?? { listeners: new Set(), latest: null };
    this.watchers.set(version.versionId, watch);
    if (onProgress) {
      watch.listeners.add(onProgress);
      if (watch.latest) onProgress(watch.latest);
    }
    try {
      return await this.versionWork.join(version.versionId, (workSignal) => this.materialise(version, workSignal), signal);
    } finally {
      if (onProgress) watch.listeners.delete(onProgress);
      if (watch.listeners.size === 0 && this.watchers.get(version.versionId) === watch) this.watchers.delete(version.versionId);
    }
  }

  /** Up to 256 versions verified and laid out here, the most recently used, sorted: what heartbeats report. */
  cachedVersions(): string[] {
    if (this.index) return cachedVersionIds(this.index, REPORTED_VERSIONS);
    // Read at the first ask: the next heartbeat has it.
    void this.loaded().catch((error: unknown) => this.opts.log('artifact cache index unreadable', { error: (error as Error).message }));
    return [];
  }

  private loaded(): Promise<CacheIndex> {
    if (this.index) return Promise.resolve(this.index);
    this.loading ??= loadIndex(this.layout.index, (reason) => this.opts.log('artifact cache index unreadable: starting a new one', { reason })).then(
      (index) => (this.index = index),
      (error: unknown) => {
        this.loading = null;
        throw error;
      },
    );
    return this.loading;
  }

  /** Runs `change` on the index after every earlier change, then saves it. */
  private update<T>(change: (index: CacheIndex) => Promise<T> | T): Promise<T> {
    const next = this.serial.then(async () => {
      const index = await this.loaded();
      const result = await change(index);
      await saveIndex(this.layout.index, index);
      return result;
    });
    // A failed change must not block the ones queued after it; its own caller gets the error through `next`.
    this.serial = next.catch(() => {});
    return next;
  }

  private async materialise(version: VersionArtifact, signal: AbortSignal): Promise<string> {
    const id = version.versionId;
    const folder = this.layout.version(id);
    const blobs = versionBlobs(version);
    await this.secureDir();
    const index = await this.loaded();
    if (index.versions[id]?.complete && (await this.intact(version))) {
      await this.update((i) => this.used(i, version, true));
      return folder;
    }
    const missing = new Map<string, number>();
    for (const [sha, size] of blobs) if ((await this.blobSize(sha)) !== size) missing.set(sha, size);
    try {
      await this.update(async (i) => {
        await this.makeRoom(i, version, blobs);
        this.reserved.set(id, missing);
        this.used(i, version, false);
      });
      if (missing.size > 0) await this.download(version, missing, blobs, signal);
      await this.layOut(version, folder);
      await this.update((i) => this.used(i, version, true));
      return folder;
    } finally {
      this.reserved.delete(id);
    }
  }

  /**
   * Creates the cache's folders (0755), refusing a cache dir that anyone but the agent can write, or that lies
   * where others could swap it, before and after: the agent (root) follows no link there and trusts what it finds.
   */
  private async secureDir(): Promise<void> {
    const folders = [this.layout.blobs, this.layout.partials, this.layout.versions];
    const before = await cacheDirProblem(this.layout.dir, folders);
    if (before !== null) throw new Error(before);
    for (const dir of [this.layout.dir, ...folders]) await mkdir(dir, { recursive: true, mode: 0o755 });
    const after = await cacheDirProblem(this.layout.dir, folders);
    if (after !== null) throw new Error(after);
  }

  /** Records a use of the version (and of its blobs) now; `complete` once its folder is laid out. */
  private used(index: CacheIndex, version: VersionArtifact, complete: boolean): void {
    const now = Date.now();
    index.versions[version.versionId] = { lastUsedAt: now, files: version.files.map(({ path, sha256, size }) => ({ path, sha256, size })), complete };
    for (const file of version.files) index.blobs[file.sha256] = { lastUsedAt: now };
  }

  /** Size of the verified blob on disk; null when there is none. Refuses one the agent did not write (a link). */
  private async blobSize(sha256: string): Promise<number | null> {
    const path = this.layout.blob(sha256);
    try {
      const info = await lstat(path);
      assertCacheFile(path, info, false);
      return info.size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }

  /** Every file of the folder a regular file of its manifest's size, and every blob there with it. */
  private async intact(version: VersionArtifact): Promise<boolean> {
    const folder = this.layout.version(version.versionId);
    // A link in place of the folder is no folder the agent laid out: it is laid out again (the link replaced).
    const laidOut = await lstat(folder).catch(() => null);
    if (!laidOut?.isDirectory()) return false;
    for (const file of version.files) {
      try {
        const linked = await lstat(join(folder, file.path));
        if (!linked.isFile() || linked.size !== file.size || (await this.blobSize(file.sha256)) !== file.size) return false;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
        throw error;
      }
    }
    return true;
  }

  /** Deletes what the eviction plan says must go for the version to fit, or fails saying why it cannot. */
  private async makeRoom(index: CacheIndex, version: VersionArtifact, blobs: Map<string, number>): Promise<void> {
    const fetching = new Map<string, number>();
    for (const [id, reserved] of this.reserved) if (id !== version.versionId) for (const [sha, size] of reserved) fetching.set(sha, size);
    const plan = planEviction({
      maxBytes: this.opts.maxBytes,
      versions: Object.entries(index.versions).map(([versionId, entry]) => ({
        versionId,
        lastUsedAt: entry.lastUsedAt,
        blobs: entry.files.map((f) => f.sha256),
      })),
      blobs: await this.sizes(this.layout.blobs),
      blobLastUsedAt: new Map(Object.entries(index.blobs).map(([sha, entry]) => [sha, entry.lastUsedAt])),
      partials: await this.sizes(this.layout.partials),
      protectedVersions: new Set([...this.opts.inUse(), ...this.versionWork.keys()]),
      fetching,
      incoming: { versionId: version.versionId, blobs },
    });
    if (!plan.fits) throw new Error(plan.message);
    if (plan.versions.length + plan.blobs.length + plan.partials.length > 0)
      this.opts.log('artifact cache eviction', { versions: plan.versions, blobs: plan.blobs.length, partials: plan.partials.length, for: version.versionId });
    for (const id of plan.versions) {
      await rm(this.layout.version(id), { recursive: true, force: true });
      delete index.versions[id];
    }
    for (const sha of plan.blobs) {
      await rm(this.layout.blob(sha), { force: true });
      delete index.blobs[sha];
    }
    for (const sha of plan.partials) await rm(this.layout.partial(sha), { force: true });
  }

  /**
   * The files of a cache folder named by digest, with their sizes (anything else there, links included, is not the
   * cache's: never followed).
   */
  private async sizes(dir: string): Promise<Map<string, number>> {
    const sizes = new Map<string, number>();
    for (const name of await readdir(dir)) {
      if (!HEX.test(name)) continue;
      const size = await lstat(join(dir, name)).then(
        (info) => (info.isFile() ? info.size : null),
        () => null,
      );
      if (size !== null) sizes.set(name, size);
    }
    return sizes;
  }

  /** Fetches the missing blobs, a few at a time, passing on progress; the first failure stops the others. */
  private async download(version: VersionArtifact, missing: Map<string, number>, blobs: Map<string, number>, signal: AbortSignal): Promise<void> {
    const partials = await this.sizes(this.layout.partials);
    let present = 0;
    for (const [sha, size] of blobs) if (!missing.has(sha)) present += size;
    const bytesTotal = [...blobs.values()].reduce((a, b) => a + b, 0);
    let lastSentAt = 0;
    const progress = (force: boolean) => {
      const now = Date.now();
      if (!force && now - lastSentAt < PROGRESS_EVERY_MS) return;
      lastSentAt = now;
      let bytesDone = present;
      // A blob not being fetched yet counts what its interrupted download left.
      for (const sha of missing.keys()) bytesDone += this.blobBytes.get(sha) ?? partials.get(sha) ?? 0;
      this.emit(version.versionId, { bytesDone, bytesTotal });
    };
    progress(true);
    const stop = new AbortController();
    const both = AbortSignal.any([signal, stop.signal]);
    const queue = [...missing.keys()];
    const byDigest = new Map(version.files.map((file) => [file.sha256, file]));
    const worker = async () => {
      for (let sha = queue.shift(); sha !== undefined; sha = queue.shift()) {
        const file = byDigest.get(sha)!;
        const blob = {
          label: `file ${file.path} of version ${version.versionId}`,
          url: file.url,
          sha256: sha,
          size: file.size,
          partialPath: this.layout.partial(sha),
          blobPath: this.layout.blob(sha),
          urlsExpireAt: version.urlsExpireAt,
        };
        const fetchOne = (blobSignal: AbortSignal) =>
          fetchBlob(blob, {
            dispatcher: this.opts.dispatcher,
            stallMs: this.opts.stallMs,
            signal: blobSignal,
            onBytes: (bytes) => {
              this.blobBytes.set(sha, bytes);
              progress(false);
            },
          });
        try {
          await this.blobWork.join(sha, fetchOne, both);
        } finally {
          this.blobBytes.delete(sha);
        }
        // Done, whoever fetched it: counted at its full size from now on.
        missing.delete(sha);
        present += file.size;
        progress(false);
      }
    };
    await Promise.all(
      Array.from({ length: Math.min(PARALLEL_FILES, queue.length) }, () =>
        worker().catch((error: unknown) => {
          stop.abort(error);
          throw error;
        }),
      ),
    );
    progress(true);
  }

  private emit(versionId: string, progress: PullProgress): void {
    const watch = this.watchers.get(versionId);
    if (!watch) return;
    watch.latest = progress;
    for (const listener of watch.listeners) listener(progress);
  }

  /**
   * Lays the version out as a folder of hard links to its blobs (a copy where the file system refuses a link),
   * built beside its place and renamed into it, so that a runtime never sees half a folder.
   */
  private async layOut(version: VersionArtifact, folder: string): Promise<void> {
    const temp = `${folder}.${randomUUID()}.tmp`;
    try {
      for (const file of version.files) {
        const target = join(temp, file.path);
        await mkdir(dirname(target), { recursive: true, mode: 0o755 });
        try {
          // link(2) links a symbolic link itself, never what it points to.
          await link(this.layout.blob(file.sha256), target);
        } catch {
          // Another file system, or one without hard links: a copy, read-only like the blob.
          await this.copyBlob(file.sha256, target);
        }
      }
      await rm(folder, { recursive: true, force: true });
      await rename(temp, folder);
    } catch (error) {
      await rm(temp, { recursive: true, force: true });
      throw error;
    }
  }

  /** Copies a blob to a new file of the version's folder, following no link on either side. */
  private async copyBlob(sha256: string, target: string): Promise<void> {
    const from = await openCacheFile(this.layout.blob(sha256), constants.O_RDONLY, false);
    if (!from) throw new Error(`the model cache's blob ${sha256} vanished before it was laid out`);
    try {
      const to = (await openCacheFile(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, true, 0o444))!;
      try {
        await pipeline(from.createReadStream({ autoClose: false }), to.createWriteStream({ autoClose: false }));
        await to.chmod(0o444);
      } finally {
        await to.close();
      }
    } finally {
      await from.close();
    }
  }
}
