import { createHash, type Hash } from 'node:crypto';
import { constants } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { request, type Dispatcher } from 'undici';
import { openCacheFile } from './cache-guard.js';

/** One file of a version to fetch into the cache. */
export interface BlobFetch {
  /** For messages: `<path> of version <id>`. */
  label: string;
  url: string;
  sha256: string;
  size: number;
  partialPath: string;
  blobPath: string;
  /** Epoch seconds after which the URL no longer works. */
  urlsExpireAt: number;
}

export interface FetchOptions {
  dispatcher: Dispatcher;
  /** A download that receives no byte for this long fails. */
  stallMs: number;
  signal: AbortSignal;
  /** Bytes of this blob on disk so far (the partial), after every chunk written. */
  onBytes: (bytes: number) => void;
  now?: () => number;
}

/**
 * The URLs of a version stopped working: the fetch waits for the next desired state, which carries fresh ones
 * (the control plane re-signs it before they expire). The partial download is kept: the next try resumes it.
 */
export class ArtifactUrlsExpired extends Error {
  override readonly name = 'ArtifactUrlsExpired';
}

/** A download cut short by the network or the server (5xx): worth trying again at once, from where it stopped. */
class Interrupted extends Error {
  override readonly name = 'Interrupted';
}

/** Statuses with which an expired presigned or signed URL is answered (S3 says 403; others 401 or 404). */
const EXPIRED_STATUSES = new Set([401, 403, 404]);
/** Clocks of the node and of whoever signed the URL may differ by this much. */
const EXPIRY_SKEW_S = 60;
const ATTEMPTS = 4;
const RETRY_MS = 250;

/** The URL without its query: presigned URLs carry their signature there, which must never reach a log. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return '(an invalid URL)';
  }
}

/**
 * Fetches one blob into the cache: resumes its partial download with `Range` (hashing what is there first),
 * hashes every byte as it streams to disk (never reading it twice), and renames the partial into `blobs/` only once its size and SHA-256
 * are the manifest's. A wrong size or digest deletes the partial; an interruption (connection cut, 5xx) is
 * retried a few times from where it stopped; an expired URL keeps the partial for the next try. Never holds more
 * than a chunk in memory.
 */
export async function fetchBlob(blob: BlobFetch, opts: FetchOptions): Promise<void> {
  let fetched: PartialDownload;
  for (let attempt = 1; ; attempt++) {
    try {
      fetched = await attemptFetch(blob, opts);
      break;
    } catch (error) {
      if (!(error instanceof Interrupted) || attempt === ATTEMPTS || opts.signal.aborted) throw error;
      await sleep(RETRY_MS * attempt, undefined, { signal: opts.signal });
    }
  }
  let problem: string | null = null;
  if (fetched.bytes !== blob.size) problem = `is ${fetched.bytes} bytes, the manifest says ${blob.size}`;
  else {
    const sha256 = fetched.hash.digest('hex');
    if (sha256 !== blob.sha256) problem = `has SHA-256 ${sha256}, the manifest says ${blob.sha256}`;
  }
  if (problem !== null) {
    await rm(blob.partialPath, { force: true });
    throw new Error(`${blob.label} ${problem}; the download was deleted`);
  }
  // Made read-only through a handle on the very file that was verified (never a link to another), then renamed:
  // a rename moves the name, whatever it names, and follows nothing.
  const verified = await openCacheFile(blob.partialPath, constants.O_RDONLY, true);
  if (!verified) throw new Error(`${blob.label}: the download ${blob.partialPath} vanished before it was kept`);
  try {
    await verified.chmod(0o444);
  } finally {
    await verified.close();
  }
  await rename(blob.partialPath, blob.blobPath);
}

/** A partial download: its bytes so far and the SHA-256 state over them. */
interface PartialDownload {
  hash: Hash;
  bytes: number;
}

/** One request for the rest of the blob, appended to its partial; resolves when the server ended its answer. */
async function attemptFetch(blob: BlobFetch, opts: FetchOptions): Promise<PartialDownload> {
  const had = await hashPartial(blob);
  if (had.bytes === blob.size) return had;
  // The stall timer runs from the request on: a server that never answers stalls as one that stops sending.
  const stall = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const armStall = () => {
    clearTimeout(timer);
    timer = setTimeout(() => stall.abort(new Error(`${blob.label}: no byte received for ${opts.stallMs / 1000} s`)), opts.stallMs);
  };
  armStall();
  const signal = AbortSignal.any([opts.signal, stall.signal]);
  let response: Dispatcher.ResponseData;
  try {
    response = await request(blob.url, { method: 'GET', headers: had.bytes > 0 ? { range: `bytes=${had.bytes}-` } : {}, dispatcher: opts.dispatcher, signal });
  } catch (error) {
    clearTimeout(timer);
    if (signal.aborted) throw signal.reason;
    throw new Interrupted(`${blob.label}: ${redactUrl(blob.url)} could not be reached: ${(error as Error).message}`, { cause: error });
  }
  try {
    const start = startOf(blob, response, had.bytes, opts.now ?? Date.now);
    const partial = start === 0 ? { hash: createHash('sha256'), bytes: 0 } : had;
    // Not followed through a link, and checked before a byte is written: truncated through the handle (O_TRUNC would
    // act before the check), appended to otherwise.
    const file = (await openCacheFile(blob.partialPath, constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND, true))!;
    let tooLong = false;
    try {
      if (start === 0) await file.truncate(0);
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        armStall();
        if (partial.bytes + chunk.length > blob.size) {
          tooLong = true;
          break;
        }
        partial.hash.update(chunk);
        await file.write(chunk);
        partial.bytes += chunk.length;
        opts.onBytes(partial.bytes);
      }
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      throw new Interrupted(`${blob.label}: download interrupted after ${partial.bytes} of ${blob.size} bytes: ${(error as Error).message}`, { cause: error });
    } finally {
      await file.close();
    }
    if (tooLong) {
      await rm(blob.partialPath, { force: true });
      throw new Error(`${blob.label}: the server sent more than the manifest's ${blob.size} bytes; the download was deleted`);
    }
    return partial;
  } finally {
    clearTimeout(timer);
    // An unread body (an error status, an abort, a file too long) would hold the connection; destroying it
    // emits an abort error that is no news here.
    response.body.on('error', () => {});
    response.body.destroy();
  }
}

/** Where the response's bytes start in the file, or why it is not a response to fetch from. */
function startOf(blob: BlobFetch, response: Dispatcher.ResponseData, had: number, now: () => number): number {
  const status = response.statusCode;
  if (status === 200) return 0; // A server that ignores Range sends the file from its start.
  if (status === 206) {
    const range = /^bytes (\d+)-\d+\/(?:\d+|\*)$/.exec(String(response.headers['content-range'] ?? ''));
    if (range && Number(range[1]) === had) return had;
    throw new Error(
      `${blob.label}: asked for bytes from ${had}, the server answered 206 with Content-Range ${JSON.stringify(response.headers['content-range'] ?? null)}`,
    );
  }
  if (EXPIRED_STATUSES.has(status) && now() / 1000 >= blob.urlsExpireAt - EXPIRY_SKEW_S) {
    throw new ArtifactUrlsExpired(
      `${blob.label}: its URL expired at ${new Date(blob.urlsExpireAt * 1000).toISOString()} (HTTP ${status}); ${had} of ${blob.size} bytes kept, the download resumes with the next desired state's URLs`,
    );
  }
  if (status >= 500) throw new Interrupted(`${blob.label}: HTTP ${status} from ${redactUrl(blob.url)}`);
  throw new Error(`${blob.label}: HTTP ${status} from ${redactUrl(blob.url)}`);
}

/**
 * The SHA-256 state and length of what a partial download holds; one longer than the file is started again. A
 * partial that is not a file the agent wrote (a link, another owner's) is refused, never read through.
 */
async function hashPartial(blob: BlobFetch): Promise<PartialDownload> {
  const hash = createHash('sha256');
  const file = await openCacheFile(blob.partialPath, constants.O_RDONLY, true);
  if (!file) return { hash, bytes: 0 };
  try {
    const bytes = (await file.stat()).size;
    if (bytes > blob.size) {
      await rm(blob.partialPath, { force: true });
      return { hash, bytes: 0 };
    }
    if (bytes === 0) return { hash, bytes };
    for await (const chunk of file.createReadStream({ start: 0, end: bytes - 1, autoClose: false }) as AsyncIterable<Buffer>) hash.update(chunk);
    return { hash, bytes };
  } finally {
    await file.close();
  }
}
