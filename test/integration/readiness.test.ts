import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';

/** `/readyz` tells a store that is away from one that is not migrated: an outage must not read as a lost schema. */
function readinessSuite(store: StoreKind) {
  let plane: TestPlane;
  beforeAll(async () => {
    plane = await startTestPlane({ store });
  });
  afterAll(async () => {
    await plane?.stop().catch(() => {});
  });

  it('is ready with every migration applied, and says the store is unreachable (not unmigrated) once it stops answering', async () => {
    const ready = await fetch(`${plane.url}/readyz`);
    expect(ready.status).toBe(200);
    // One role migrates and serves here (PGlite's, the suite's superuser): it could switch the audit trigger off.
    expect(await ready.json()).toEqual({ status: 'ready', store, reachable: true, migrated: true, auditOwnedByPlane: true });
    await plane.ports.store.close();
    const away = await fetch(`${plane.url}/readyz`);
    expect(away.status).toBe(503);
    expect(await away.json()).toEqual({ status: 'store_unreachable', store, reachable: false, migrated: null, auditOwnedByPlane: null });
    // The process itself is still up.
    expect((await fetch(`${plane.url}/healthz`)).status).toBe(200);
  });
}

describe('readiness (PGlite)', () => readinessSuite('pglite'));
describePg('readiness (PostgreSQL)', () => readinessSuite('pg'));
