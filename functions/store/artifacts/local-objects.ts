import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { OpenedFile } from '../../kernel/ports/artifact-store.js';
import { checkedDataKey, ObjectTooLargeError, type ObjectStore, type StoredObject } from '../../kernel/ports/object-store.js';
import { readAll } from '../../kernel/web-streams.js';
import { isMissing, openedFile } from './local.js';

/**
 * Jobs' data in the local artifact store's directory (docs/artifacts.md, "Job data"): `<root>/_data/...`, one file
 * per object, owner-only. An object is written under a temporary name beside its own and renamed once whole, so a
 * reader never opens half of one and a failed write leaves nothing behind.
 */
export function localObjectStore(root: string): ObjectStore {
  const pathOf = (key: string) => join(root, ...checkedDataKey(key).split('/'));

  return {
    async putObject(key: string, body: ReadableStream<Uint8Array>, { maxBytes }: { maxBytes: number }): Promise<StoredObject> {
      const path = pathOf(key);
      await mkdir(dirname(path), { recursive: true, mode: 0o700 });
      // Keys' segments hold no dot: no key names a temporary file.
      const partial = `${path}.${randomUUID()}.part`;
      const hash = createHash('sha256');
      let size = 0;
      try {
        await pipeline(
          readAll(body),
          async function* (chunks: AsyncIterable<Uint8Array>) {
            for await (const chunk of chunks) {
              size += chunk.length;
              if (size > maxBytes) throw new ObjectTooLargeError(maxBytes);
              hash.update(chunk);
              yield chunk;
            }
          },
          createWriteStream(partial, { flags: 'wx', mode: 0o600 }),
        );
        await rename(partial, path);
      } catch (error) {
        await rm(partial, { force: true });
        throw error;
      }
      return { size, sha256: hash.digest('hex') };
    },

    async openObject(key: string): Promise<OpenedFile | null> {
      try {
        return await openedFile(await open(pathOf(key), 'r'));
      } catch (error) {
        if (isMissing(error)) return null;
        throw error;
      }
    },

    async deleteObject(key: string): Promise<void> {
      await rm(pathOf(key), { force: true });
    },
  };
}
