import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { migrationsFolder } from './migrations-folder.js';

/**
 * A new embedded store starts from a template (docs/operations.md, "The embedded store"): PGlite's initial database,
 * migrated, dumped once per PGlite release and set of migrations into the user's cache. Creating a database costs
 * PGlite about 4 s of CPU (its initdb), loading the dump about 1 s: `npm start` on a fresh data directory and
 * every test plane pay the difference. The template holds the schema and what the migrations insert, nothing of an
 * installation (no key, no token: those are written after it is opened).
 *
 * The cache is trusted as the data directory is: it is used only when this user owns it and nobody else may write
 * to it, since a planted template would be the store.
 */
const PREFIX = 'pglite-store-';

function cacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'lunanexa');
}

/** The template's name: PGlite's release and every migration's hash (read once: neither changes while running). */
let name: Promise<string> | null = null;
function templateName(): Promise<string> {
  name ??= (async () => {
    const require = createRequire(import.meta.url);
    // Its package.json is not among its exports: it lies above the entry.
    const pkg = JSON.parse(await readFile(join(dirname(require.resolve('@electric-sql/pglite')), '..', 'package.json'), 'utf8')) as { version: string };
    const hash = createHash('sha256').update(pkg.version);
    for (const migration of readMigrationFiles({ migrationsFolder: migrationsFolder() })) hash.update(migration.hash);
    return `${PREFIX}${hash.digest('hex').slice(0, 32)}.tar`;
  })();
  return name;
}

/** The cache directory when it is this user's alone, made so if missing; null otherwise (no template is used). */
async function privateCache(): Promise<string | null> {
  const dir = cacheDir();
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const info = await stat(dir);
    const mine = process.getuid === undefined || info.uid === process.getuid();
    return mine && (info.mode & 0o022) === 0 ? dir : null;
  } catch {
    return null;
  }
}

/** The cached template's path, or null when there is none yet (or no private cache). */
export async function cachedStoreTemplate(): Promise<string | null> {
  const dir = await privateCache();
  if (!dir) return null;
  const file = await templateName();
  return (await readdir(dir)).includes(file) ? join(dir, file) : null;
}

/**
 * Keeps a freshly created and migrated store as the template, replacing those of other releases or migrations. A
 * failure costs only the next store the time this one took.
 */
export async function keepStoreTemplate(client: PGlite): Promise<void> {
  const dir = await privateCache();
  if (!dir) return;
  try {
    const file = await templateName();
    const dump = Buffer.from(await (await client.dumpDataDir('none')).arrayBuffer());
    const temporary = join(dir, `.${file}.${process.pid}.${Date.now()}`);
    await writeFile(temporary, dump, { mode: 0o600 });
    await rename(temporary, join(dir, file));
    for (const entry of await readdir(dir)) if (entry.startsWith(PREFIX) && entry !== file) await rm(join(dir, entry), { force: true });
  } catch {
    // The cache is an optimisation only.
  }
}
