import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { eq } from 'drizzle-orm';
import pino from 'pino';
import { controllerTick } from '../../functions/controller/driver.js';
import { sweepExpiredWorkloads, writeWorkloads } from '../../functions/services/workloads.js';
import { migrateAsOwner } from '../../functions/store/owner-migrate.js';
import { workloads } from '../../functions/store/schema/index.js';
import type { ChainVerdict } from '../../shared/audit-chain.js';
import { PG_URL, createTestDatabase, describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * Security review 2, L4: the control plane's own database role could switch the audit log's append-only trigger
 * off and cut its newest entries, because it applied the migrations and so owned the table. With
 * LUNANEXA_DATABASE_OWNER_URL another role migrates and owns the tables, and the plane's role may only read and
 * append to `audit_events`; the single-role setup still runs, with a warning and `/readyz` saying so.
 */

type Database = Awaited<ReturnType<typeof createTestDatabase>>;

const suffix = `${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;

/** Runs `text` as superuser on the server (no database of its own: roles and databases). */
async function asSuperuser(text: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/** A login role of its own for this run; the URL of `database` as it. */
async function createRole(name: string): Promise<{ name: string; urlOf(database: Database): string }> {
  const role = `lnx_l4_${name}_${suffix}`;
  const password = randomBytes(12).toString('hex');
  await asSuperuser(`create role ${role} login password '${password}'`);
  return {
    name: role,
    urlOf(database) {
      const url = new URL(database.url);
      url.username = role;
      url.password = password;
      return url.toString();
    },
  };
}

/** A scratch database that `owner` owns, public schema included, as an operator would create it. */
async function createOwnedDatabase(owner: string): Promise<Database> {
  const database = await createTestDatabase();
  const name = new URL(database.url).pathname.slice(1);
  await asSuperuser(`alter database ${name} owner to ${owner}`);
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  await client.query(`alter schema public owner to ${owner}`);
  await client.end();
  return database;
}

/** The SQLSTATE and message `text` fails with as the role of `url`, or null when it succeeds. */
async function failure(url: string, text: string): Promise<{ code: string; message: string } | null> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(text);
    return null;
  } catch (error) {
    const { code, message } = error as pg.DatabaseError;
    return { code: code ?? '', message };
  } finally {
    await client.end();
  }
}

/** Log lines at warn and above, parsed. */
function capturingLogger() {
  const lines: Array<{ level: number; msg: string }> = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line) as { level: number; msg: string }) });
  return { logger, lines };
}

const TAMPER_WARNING = /audit log can be tampered with by this control plane's own database role/;

describePg('security review 2, L4: the audit log is append-only for the control plane’s own role', () => {
  const roles: string[] = [];
  const databases: Database[] = [];
  afterAll(async () => {
    for (const database of databases) await database.drop();
    for (const role of roles) await asSuperuser(`drop role if exists ${role}`);
  });

  async function verdict(plane: TestPlane): Promise<ChainVerdict> {
    const response = await plane.admin('/api/v1/audit/verify');
    expect(response.status).toBe(200);
    return (await response.json()) as ChainVerdict;
  }

  describe('migrated by an owner role (LUNANEXA_DATABASE_OWNER_URL)', () => {
    let plane: TestPlane;
    let ownerUrl: string;
    let appUrl: string;
    let appRole: string;
    const log = capturingLogger();

    beforeAll(async () => {
      const owner = await createRole('owner');
      const app = await createRole('app');
      roles.push(app.name, owner.name);
      appRole = app.name;
      const database = await createOwnedDatabase(owner.name);
      databases.push(database);
      ownerUrl = owner.urlOf(database);
      appUrl = app.urlOf(database);
      plane = await startTestPlane({ databaseUrl: appUrl, databaseOwnerUrl: ownerUrl, logger: log.logger });
    });
    afterAll(async () => {
      await plane?.stop();
    });

    it('serves on the app role, which neither owns the audit table nor may change or remove its rows', async () => {
      const created = await plane.admin('/api/v1/tokens', { method: 'POST', body: JSON.stringify({ name: 'l4 reader', role: 'viewer' }) });
      expect(created.status, await created.clone().text()).toBe(201);
      const before = await verdict(plane);
      expect(before).toMatchObject({ ok: true });
      expect(before.entries).toBeGreaterThanOrEqual(2);

      // The finding's repro, statement by statement, as the plane's own role.
      expect(await failure(appUrl, 'alter table audit_events disable trigger user')).toMatchObject({
        code: '42501',
        message: expect.stringMatching(/must be owner/),
      });
      for (const statement of [
        `delete from audit_events where seq > ${before.entries - 3}`,
        `update audit_events set details = '{"forged":true}'`,
        'truncate audit_events',
      ]) {
        expect(await failure(appUrl, statement), statement).toMatchObject({
          code: '42501',
          message: expect.stringMatching(/permission denied for table audit_events/),
        });
      }
      expect(await verdict(plane)).toEqual(before);

      const ready = await fetch(`${plane.url}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: 'ready', store: 'pg', reachable: true, migrated: true, auditOwnedByPlane: false });
    });

    it("still does everything else the plane does as that role: writes, deletes, the bus, the controller's sweeps", async () => {
      const put = await plane.admin('/api/v1/deployments/l4-chat', {
        method: 'PUT',
        body: JSON.stringify({ model: 'm', runtime: { kind: 'simulated', model: 'm' }, replicas: 0, selector: { none: 'none' } }),
      });
      expect(put.status, await put.clone().text()).toBe(200);
      expect((await plane.admin('/api/v1/deployments/l4-chat', { method: 'DELETE' })).status).toBe(200);
      const token = (await (await plane.admin('/api/v1/tokens', { method: 'POST', body: JSON.stringify({ name: 'l4 revoked', role: 'viewer' }) })).json()) as {
        id: string;
      };
      expect((await plane.admin(`/api/v1/tokens/${token.id}`, { method: 'DELETE' })).status).toBe(200);

      // LISTEN/NOTIFY between the plane's own connections.
      const heard: unknown[] = [];
      const unsubscribe = plane.ports.bus.subscribe('machine:mch_l4', (message) => heard.push(message));
      await plane.ports.bus.publish('machine:mch_l4', { type: 'desired' });
      await waitFor(async () => heard.length === 1);
      unsubscribe();

      // The retention sweep deletes workloads (never audit entries); the tick takes its advisory lock and sweeps. The
      // plane's own tick may sweep the row first: either way, as this role.
      const old = { workspaceId: plane.workspaceId, deploymentId: 'dep_l4', kind: 'chat', deadline: new Date(), instanceId: plane.ports.instanceId };
      await writeWorkloads(plane.ports.store.db, [{ ...old, id: 'wkl_l4_old', state: 'succeeded', createdAt: new Date(Date.now() - 40 * 86_400_000) }]);
      await sweepExpiredWorkloads({ ctx: plane.systemCtx, input: { retentionDays: 30, batchSize: 10, maxBatches: 1 } });
      expect(await plane.ports.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.id, 'wkl_l4_old'))).toEqual([]);
      await controllerTick({ ctx: plane.systemCtx });

      expect(await verdict(plane)).toMatchObject({ ok: true });
      expect(log.lines.map((line) => line.msg)).toEqual([]);
    });

    it('grants again on every migration run, so a table a migration adds is covered and the audit table stays append-only', async () => {
      const owner = new pg.Client({ connectionString: ownerUrl });
      await owner.connect();
      await owner.query('create table l4_added (id text primary key)');
      await owner.end();
      expect(await failure(appUrl, "insert into l4_added values ('a')")).toMatchObject({ code: '42501' });
      await migrateAsOwner(ownerUrl, appRole);
      expect(await failure(appUrl, "insert into l4_added values ('a'); update l4_added set id = 'b'; delete from l4_added")).toBeNull();
      expect(await failure(appUrl, 'delete from audit_events')).toMatchObject({ code: '42501' });
      expect(await failure(appUrl, 'alter table audit_events disable trigger user')).toMatchObject({ code: '42501' });
    });

    it('starts an instance without the owner URL once the owner has migrated, and refuses one with migrations pending', async () => {
      const second = await startTestPlane({ databaseUrl: appUrl });
      try {
        expect(await (await fetch(`${second.url}/readyz`)).json()).toMatchObject({ status: 'ready', auditOwnedByPlane: false });
      } finally {
        await second.stop();
      }
      const owner = new pg.Client({ connectionString: ownerUrl });
      await owner.connect();
      try {
        const { rows } = await owner.query(
          'delete from drizzle.__drizzle_migrations where id = (select max(id) from drizzle.__drizzle_migrations) returning *',
        );
        const dataDir = await mkdtemp(join(tmpdir(), 'lnx-l4-'));
        await expect(startTestPlane({ databaseUrl: appUrl, dataDir })).rejects.toThrow(
          /1 migration\(s\) pending, and DATABASE_URL's role does not own the tables/,
        );
        await rm(dataDir, { recursive: true, force: true });
        await owner.query('insert into drizzle.__drizzle_migrations (id, hash, created_at) values ($1, $2, $3)', [
          rows[0].id,
          rows[0].hash,
          rows[0].created_at,
        ]);
      } finally {
        await owner.end();
      }
    });
  });

  describe('migrated by the plane’s own role (the single-role setup)', () => {
    let plane: TestPlane;
    let soloUrl: string;
    const log = capturingLogger();

    beforeAll(async () => {
      const solo = await createRole('solo');
      roles.push(solo.name);
      const database = await createOwnedDatabase(solo.name);
      databases.push(database);
      soloUrl = solo.urlOf(database);
      plane = await startTestPlane({ databaseUrl: soloUrl, logger: log.logger });
    });
    afterAll(async () => {
      await plane?.stop();
    });

    it('still runs, warns once at start and says so on /readyz: its role can cut the newest entries unseen', async () => {
      expect(log.lines.filter((line) => TAMPER_WARNING.test(line.msg))).toHaveLength(1);
      const ready = await fetch(`${plane.url}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({ status: 'ready', auditOwnedByPlane: true });

      for (const name of ['l4 a', 'l4 b', 'l4 c']) {
        expect((await plane.admin('/api/v1/tokens', { method: 'POST', body: JSON.stringify({ name, role: 'viewer' }) })).status).toBe(201);
      }
      const before = await verdict(plane);
      expect(before).toMatchObject({ ok: true });
      // What the separate owner role prevents: the finding's repro, as this role, goes through.
      expect(
        await failure(
          soloUrl,
          `begin; alter table audit_events disable trigger user; delete from audit_events where seq > ${before.entries - 3};
           alter table audit_events enable trigger user; commit;`,
        ),
      ).toBeNull();
      expect(await verdict(plane)).toMatchObject({ ok: true, entries: before.entries - 3 });
    });
  });
});
