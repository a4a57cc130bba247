import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { newSecretKey, parseSecretKey } from '../core/registry/secret-box.js';

/**
 * The Node control plane's runtime-secret key when LUNANEXA_SECRET_KEY does not give one: `<data dir>/secret.key`
 * (mode 0600), generated on first start. Node only (the Worker takes LUNANEXA_SECRET_KEY). Instances that share
 * one database must share the key: set LUNANEXA_SECRET_KEY on each, or copy the file.
 */
export async function loadSecretKeyFile(dataDir: string): Promise<string> {
  const path = join(dataDir, 'secret.key');
  try {
    await writeFile(path, `${newSecretKey()}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    // Kept when it exists: it encrypts every stored secret. `wx` makes two starts racing write it once.
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const key = (await readFile(path, 'utf8')).trim();
  try {
    parseSecretKey(key);
  } catch (error) {
    throw new Error(`${path}: ${(error as Error).message}`);
  }
  return key;
}
