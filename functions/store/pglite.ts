import { chmod, mkdir, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import { migrate } from 'drizzle-orm/pglite/migrator';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';
import { migrationsFolder } from './migrations-folder.js';
import { cachedStoreTemplate, keepStoreTemplate } from './pglite-template.js';

/**
 * The store's files hold every secret's hash and the control plane's signing key: owner only. PostgreSQL creates
 * its own files 0600 and directories 0700, but PGlite unpacks its initial data directory with the archive's modes
 * (0666 and 0755, set by chmod, so no umask narrows them): those are brought back to the owner on every open.
 */
async function ownerOnly(dir: string): Promise<void> {
  await chmod(dir, 0o700);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await ownerOnly(path);
    else if (entry.isFile()) await chmod(path, 0o600);
  }
}

/**
 * The embedded store: PGlite persisted under `dir` (0700, files 0600), or in memory when `dir` is undefined. A new
 * one on disk starts from the cached template when there is one (`cachedStoreTemplate`); a new one becomes the
 * template when there is none.
 */
export async function openPgliteStore(dir?: string): Promise<Store> {
  // Created here, not by PGlite (which would leave it 0755), before a file is written into it.
  if (dir) await mkdir(dir, { recursive: true, mode: 0o700 });
  const fresh = dir === undefined || (await readdir(dir)).length === 0;
  const cached = fresh ? await cachedStoreTemplate() : null;
  // In memory, PGlite unpacks a dump more slowly than it creates a database (measured 5.2 s against 4.6 s).
  const template = cached && dir !== undefined ? await readFile(cached).catch(() => null) : null;
  const client = new PGlite(dir, template ? { loadDataDir: new Blob([template]) } : {});
  await client.waitReady;
  const db = drizzle({ client, schema });
  await migrate(db, { migrationsFolder: migrationsFolder() });
  if (fresh && !cached) await keepStoreTemplate(client);
  if (dir) await ownerOnly(dir);
  return { db: db as unknown as Db, kind: 'pglite', close: () => client.close() };
}
