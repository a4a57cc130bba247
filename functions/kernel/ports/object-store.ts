import type { OpenedFile } from './artifact-store.js';

/** What a stored object is: its size and the SHA-256 (hex) of its bytes, measured as they were written. */
export interface StoredObject {
  size: number;
  sha256: string;
}

/** A body longer than `putObject`'s `maxBytes`: nothing was kept of it. */
export class ObjectTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`the object exceeds ${maxBytes} bytes`);
  }
}

/**
 * The writable side of the artifact store, for jobs' data (docs/artifacts.md, "Job data"): objects the control
 * plane itself writes, reads back and deletes, in the same directory or bucket as model versions but under
 * `_data/`, which no workspace id can be (`dataKey`). Bodies are streamed through, never held whole.
 */
export interface ObjectStore {
  /**
   * Writes `body` to `key` (replacing nothing: keys are fresh ids), hashing it on the way. Over `maxBytes` it stops
   * reading, keeps nothing and throws `ObjectTooLargeError`; an error of `body` itself is rethrown as it is, and
   * leaves nothing either. The object appears whole or not at all.
   */
  putObject(key: string, body: ReadableStream<Uint8Array>, options: { maxBytes: number }): Promise<StoredObject>;
  /** Opens an object for reading, or null when there is none at `key`. */
  openObject(key: string): Promise<OpenedFile | null>;
  /** Deletes the object at `key`; none there is no error. */
  deleteObject(key: string): Promise<void>;
}

/** Segments of a data key: what ids and fixed names are made of, never `.` or `..`. */
const KEY = /^_data(\/[A-Za-z0-9_-]+)+$/;

/** Where a file of the Files API lives, relative to the store's root (or bucket prefix). */
export function fileDataKey(workspaceId: string, fileId: string): string {
  return checkedDataKey(`_data/${workspaceId}/files/${fileId}`);
}

/** `key` when it is a data key, so that no key an adapter is handed can leave `_data/` (a `..`, a `/` too many). */
export function checkedDataKey(key: string): string {
  if (!KEY.test(key)) throw new Error(`not a data key: ${JSON.stringify(key)}`);
  return key;
}
