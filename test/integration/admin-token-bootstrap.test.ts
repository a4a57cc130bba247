import { access, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { and, eq, isNull } from 'drizzle-orm';
import { pino } from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startControlPlane, type RunningControlPlane } from '../../functions/hosts/node.js';
import { apiTokens } from '../../functions/store/schema/index.js';
import { FAST_TEST_CONFIG } from '../helpers/fast-config.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';

/**
 * One admin token per store, not per data dir: the first start of a shared store mints it; an instance started
 * later with a fresh data dir mints none, and says how to get one (`npm run db:bootstrap`).
 */
describePg('the bootstrap admin token on a shared store', () => {
  let db: { url: string; drop(): Promise<void> };
  const planes: RunningControlPlane[] = [];
  const dirs: string[] = [];
  const lines: string[] = [];
  const logger = pino(
    { level: 'warn' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  );

  async function start(): Promise<RunningControlPlane> {
    const dataDir = await mkdtemp(join(tmpdir(), 'lnx-admin-'));
    dirs.push(dataDir);
    const plane = await startControlPlane({ port: 0, dataDir, databaseUrl: db.url, config: FAST_TEST_CONFIG, logger });
    planes.push(plane);
    return plane;
  }
  const activeAdmins = async (plane: RunningControlPlane) =>
    await plane.ports.store.db
      .select({ id: apiTokens.id })
      .from(apiTokens)
      .where(and(eq(apiTokens.role, 'admin'), isNull(apiTokens.revokedAt)));

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    for (const plane of planes) await plane.close();
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
    await db?.drop();
  });

  it('mints on the first start of the store only, and a second data dir says how to get a token', async () => {
    const first = await start();
    expect(first.adminToken).toMatch(/^lnx_/);
    expect(await activeAdmins(first)).toHaveLength(1);

    const second = await start();
    expect(second.adminToken).toBeNull();
    await expect(access(second.adminTokenPath)).rejects.toThrow();
    expect(await activeAdmins(first)).toHaveLength(1);
    expect(lines.join('')).toContain('npm run db:bootstrap');

    // The first one's data dir keeps its token: a restart reads it, mints nothing.
    await first.close();
    planes.splice(planes.indexOf(first), 1);
    const again = await startControlPlane({ port: 0, dataDir: dirs[0]!, databaseUrl: db.url, config: FAST_TEST_CONFIG, logger });
    planes.push(again);
    expect(again.adminToken).toBe(first.adminToken);
    expect(await activeAdmins(again)).toHaveLength(1);
  });
});
