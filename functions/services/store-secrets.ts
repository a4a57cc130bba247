import { eq } from 'drizzle-orm';
import { clusterSettings } from '../store/schema/index.js';
import type { Db } from '../store/db.js';

/** 32 random bytes, base64url. */
function randomKey(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url');
}

const loaded = new WeakMap<object, Map<string, Promise<string>>>();

/**
 * A random HMAC key made once per store and kept in `cluster_settings` under `setting`, as the cluster id is: every
 * instance on the store, and every restart, agrees on it without configuration. Loaded once per `owner` (an
 * instance's ports); a store that did not answer is asked again next time, not remembered as failed. Each use
 * has a setting of its own, so that one key's leak or rotation leaves the others alone.
 */
export function storeSecret(owner: { store: { db: Db } }, setting: string): Promise<string> {
  let secrets = loaded.get(owner);
  if (!secrets) loaded.set(owner, (secrets = new Map()));
  let secret = secrets.get(setting);
  if (!secret) {
    secret = (async () => {
      const db = owner.store.db;
      await db.insert(clusterSettings).values({ key: setting, value: randomKey() }).onConflictDoNothing();
      const [row] = await db.select().from(clusterSettings).where(eq(clusterSettings.key, setting));
      const value = row?.value;
      if (typeof value !== 'string' || value.length < 32) throw new Error(`cluster setting ${setting} is not a key`);
      return value;
    })();
    // Not swallowed: every caller awaits `secret` and gets the failure; this only forgets it so the next call retries.
    secret.catch(() => secrets.delete(setting));
    secrets.set(setting, secret);
  }
  return secret;
}

/** The key of the local artifact store's signed URLs (functions/store/artifacts/local-urls.ts). */
export function artifactUrlKey(owner: { store: { db: Db } }): Promise<string> {
  return storeSecret(owner, 'artifact_url_key');
}
