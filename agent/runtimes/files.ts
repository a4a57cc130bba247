import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open, readlink, realpath, type FileHandle } from 'node:fs/promises';
import { relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { insideRoots } from '../policy.js';
import { refusedByPolicy, withLocalDetail } from './adapter.js';

/** How much the agent reads of one file, and for how long. */
export interface ReadLimits {
  maxBytes: number;
  maxMs: number;
}

/** Executables are read whole to check their pin; a real one is far smaller than this. */
const EXECUTABLE_LIMITS: ReadLimits = { maxBytes: 4 * 1024 ** 3, maxMs: 120_000 };

const CHUNK = 1024 * 1024;

/**
 * SHA-256 of an open file, which must be a regular file (never a device such as /dev/zero, a FIFO or a socket)
 * of at most `maxBytes`, read within `maxMs` (checked between chunks: a read the kernel itself never returns is
 * the file system's to end) and no later than `signal` aborts.
 */
async function hashOpenFile(file: FileHandle, label: string, limits: ReadLimits, signal?: AbortSignal): Promise<string> {
  const info = await file.stat();
  if (!info.isFile()) throw refusedByPolicy(`${label} is not a regular file`);
  if (info.size > limits.maxBytes) throw refusedByPolicy(`${label} is ${info.size} bytes, more than the ${limits.maxBytes} this agent reads`);
  const hash = createHash('sha256');
  const buffer = Buffer.alloc(CHUNK);
  const deadline = Date.now() + limits.maxMs;
  let total = 0;
  for (;;) {
    signal?.throwIfAborted();
    if (Date.now() > deadline) throw new Error(`reading ${label} took longer than ${limits.maxMs / 1000} s`);
    const { bytesRead } = await file.read(buffer, 0, CHUNK, null);
    if (bytesRead === 0) return hash.digest('hex');
    // A file that grows while it is read is bounded all the same.
    total += bytesRead;
    if (total > limits.maxBytes) throw refusedByPolicy(`${label} grew past the ${limits.maxBytes} bytes this agent reads`);
    hash.update(buffer.subarray(0, bytesRead));
  }
}

/**
 * The SHA-256 of an executable as it is on disk (through its symbolic links, as exec follows them). Non-blocking
 * open: a FIFO put in its place must not hang the agent.
 */
export async function executableDigest(path: string): Promise<string> {
  const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    return await hashOpenFile(file, path, EXECUTABLE_LIMITS);
  } finally {
    await file.close();
  }
}

/** `roots` resolved through their symbolic links; a root that does not exist holds nothing. */
export async function resolveRoots(roots: readonly string[]): Promise<string[]> {
  const resolved: string[] = [];
  for (const root of roots) {
    try {
      resolved.push(await realpath(root));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  return resolved;
}

/**
 * The real path of a `file:` artifact, refused unless it lies inside one of `roots` (resolved) once every symbolic
 * link is followed: a link in a root never leads the agent (root) to /etc/shadow or /dev/zero. What the refusal says
 * goes to the control plane, so outside the roots it is one answer whatever is there (no real path, no existence
 * oracle for the agent's root reads); inside a root it names the path relative to it. The node's log has the rest.
 */
export async function artifactPath(uri: string, roots: readonly string[]): Promise<string> {
  const outside = (detail: string) =>
    withLocalDetail(refusedByPolicy(`artifact ${uri} is not a file inside the allowed artifact roots`), `artifact ${uri}: ${detail}`);
  let named: string;
  try {
    named = resolve(fileURLToPath(uri));
  } catch (error) {
    throw new Error(`artifact ${uri} is not a file path: ${(error as Error).message}`, { cause: error });
  }
  let path: string;
  try {
    path = await realpath(named);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'an error';
    const root = roots.find((r) => insideRoots([r], named));
    if (root === undefined) throw outside(`cannot be resolved: ${(error as Error).message}`);
    const inside = relative(root, named) || '.';
    const why = code === 'ENOENT' ? 'does not exist in its artifact root' : `cannot be read in its artifact root (${code})`;
    throw withLocalDetail(new Error(`artifact ${uri} cannot be resolved: ${inside} ${why}`, { cause: error }), (error as Error).message);
  }
  if (!insideRoots(roots, path)) throw outside(`resolves to ${path}, outside the allowed artifact roots`);
  return path;
}

/**
 * Resolves an artifact inside `roots` and hashes it within `limits`. Opened without following a link, then checked
 * through /proc to be the very file that was resolved: a link swapped in between is caught.
 */
export async function hashArtifact(uri: string, roots: readonly string[], limits: ReadLimits, signal?: AbortSignal): Promise<{ path: string; sha256: string }> {
  const path = await artifactPath(uri, roots);
  const file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const opened = await readlink(`/proc/self/fd/${file.fd}`);
    if (opened !== path) throw withLocalDetail(new Error(`artifact ${uri} changed while it was opened`), `opened ${opened}, not ${path}`);
    return { path, sha256: await hashOpenFile(file, `artifact ${uri}`, limits, signal) };
  } finally {
    await file.close();
  }
}
