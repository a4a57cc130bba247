import { afterAll, beforeAll, describe } from 'vitest';
import { openPgliteStore } from '../../functions/store/pglite.js';
import { openPgStore } from '../../functions/store/pg.js';
import type { Store } from '../../functions/store/db.js';
import { createTestDatabase, describePg } from './pg.js';

/**
 * Runs `suite` against each real store, migrated and empty: PGlite in memory, and a throwaway database on
 * the PostgreSQL server when one is configured. `store()` is the suite's store once its tests run.
 */
export function describeStores(what: string, suite: (store: () => Store) => void): void {
  const register = (open: () => Promise<{ store: Store; done(): Promise<void> }>) => () => {
    let store: Store;
    let done: () => Promise<void>;
    beforeAll(async () => {
      ({ store, done } = await open());
    });
    afterAll(async () => {
      await store?.close();
      await done?.();
    });
    suite(() => store);
  };
  describe(
    `${what} on PGlite`,
    register(async () => ({ store: await openPgliteStore(), done: async () => {} })),
  );
  describePg(
    `${what} on PostgreSQL`,
    register(async () => {
      const database = await createTestDatabase();
      return { store: await openPgStore(database.url, { migrate: true }), done: () => database.drop() };
    }),
  );
}
