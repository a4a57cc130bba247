/**
 * The rules of a model version's manifest paths (docs/registry.md, "Manifests"). A path names a file inside the
 * version's folder of the artifact store, and later on a node's disk: anything that could resolve outside that
 * folder, or name one file twice, is refused here, before it is stored.
 */

/** Longest path, and longest segment (a file name: most file systems stop at 255 bytes). */
export const MANIFEST_PATH_MAX_CHARS = 1_024;
const SEGMENT_MAX_BYTES = 255;

/** C0 control characters (NUL included) and DEL: in no file name a person means. */
const CONTROL = /[\u0000-\u001f\u007f]/;

/** What is wrong with a manifest path, or null when it is a relative, '/'-separated path inside the folder. */
export function manifestPathProblem(path: string): string | null {
  if (path.length === 0) return 'a path must not be empty';
  if (path.length > MANIFEST_PATH_MAX_CHARS) return `a path must be at most ${MANIFEST_PATH_MAX_CHARS} characters`;
  if (CONTROL.test(path)) return 'a path must not carry control characters';
  if (path.includes('\\')) return "a path separates its folders with '/', never a backslash";
  if (path.startsWith('/')) return "a path is relative to the version's folder: no leading '/'";
  for (const segment of path.split('/')) {
    if (segment === '') return "a path must not have an empty segment ('//' or a trailing '/')";
    // '.' would let two spellings name one file; '..' would leave the folder.
    if (segment === '..' || segment === '.') return `a path must not have a '${segment}' segment`;
    if (new TextEncoder().encode(segment).length > SEGMENT_MAX_BYTES) return `a path segment must be at most ${SEGMENT_MAX_BYTES} bytes`;
  }
  return null;
}

/** The paths named more than once (compared exactly: `A.bin` and `a.bin` are two files), each once, in order. */
export function duplicatePaths(paths: readonly string[]): string[] {
  const seen = new Set<string>();
  const repeated = new Set<string>();
  for (const path of paths) {
    if (seen.has(path)) repeated.add(path);
    seen.add(path);
  }
  return [...repeated];
}
