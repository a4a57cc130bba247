import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Where the committed SQL migrations are: beside this module in the source tree, and beside the bundle in dist/. */
export function migrationsFolder(): string {
  const path = fileURLToPath(new URL('./migrations/', import.meta.url));
  if (!existsSync(path)) throw new Error(`SQL migrations not found at ${path}`);
  return path;
}
