import { open, rm, stat, truncate } from 'node:fs/promises';
import { writeFileAtomic } from '../state.js';

/** Longest line handed out: the log upload contract caps each line at 4096 characters. */
const MAX_LINE = 4096;

/**
 * The last `maxBytes` bytes of a file at most, starting at a line boundary when the file is longer (a line
 * cut in two would be handed out as if whole). A missing file reads as empty.
 */
async function readEnd(path: string, maxBytes: number): Promise<Buffer> {
  let file;
  try {
    file = await open(path, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return Buffer.alloc(0);
    throw error;
  }
  try {
    const { size } = await file.stat();
    const length = Math.min(size, maxBytes);
    const buffer = Buffer.alloc(length);
    // The runtime may truncate or append meanwhile: what was read is what counts.
    const { bytesRead } = await file.read(buffer, 0, length, size - length);
    const data = buffer.subarray(0, bytesRead);
    if (size <= maxBytes) return data;
    const newline = data.indexOf(10);
    return newline === -1 ? data : data.subarray(newline + 1);
  } finally {
    await file.close();
  }
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
}

/**
 * A runtime's output as a bounded ring of two files on disk. The runtime appends to the live file through its
 * own O_APPEND descriptor, so it keeps writing across agent restarts. `rotate`, which the supervisor runs about
 * every second, copies the live file to `<path>.1` once it passes half the bound (replacing the previous segment
 * atomically) and truncates it: disk use stays within the bound, give or take what the runtime writes between
 * two rotations. Reading never modifies either file and needs no process, so a crashed runtime's last lines stay
 * readable until it is retired for good.
 */
export class LogRing {
  /** Rotations and reads of this ring, one at a time: a read never sees a segment half rotated. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    readonly path: string,
    readonly maxBytes = 4 * 1024 * 1024,
  ) {}

  get segmentPath(): string {
    return `${this.path}.1`;
  }

  /** Moves the live file's content to the segment once it passes half the bound. */
  rotate(): Promise<void> {
    return this.serial(async () => {
      const half = Math.floor(this.maxBytes / 2);
      if ((await sizeOf(this.path)) <= half) return;
      // Only the newest half fits the segment: a runtime that wrote faster than the rotations loses its oldest lines.
      await writeFileAtomic(this.segmentPath, await readEnd(this.path, half));
      // What the runtime writes between the read above and the truncation is lost (copytruncate's window):
      // renaming the file instead would leave the runtime writing into the segment through its descriptor.
      await truncate(this.path, 0);
    });
  }

  /** The last `lines` lines of the segment and the live file together, each cut to the upload contract's length. */
  tail(lines: number): Promise<string[]> {
    return this.serial(async () => {
      const segment = await readEnd(this.segmentPath, this.maxBytes);
      const live = await readEnd(this.path, this.maxBytes);
      // Joined as bytes: a line (or a character) the runtime was writing when the file rotated continues in the live file.
      const all = Buffer.concat([segment, live]).toString('utf8').split('\n');
      if (all.at(-1) === '') all.pop();
      return all.slice(-Math.max(0, lines)).map((line) => line.slice(0, MAX_LINE));
    });
  }

  /** Deletes both files: the runtime was retired for good. */
  remove(): Promise<void> {
    return this.serial(async () => {
      await rm(this.path, { force: true });
      await rm(this.segmentPath, { force: true });
    });
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const result = this.queue.then(work);
    // A failed step must not block the ones queued after it; its own caller gets the error through `result`.
    this.queue = result.catch(() => undefined);
    return result;
  }
}
