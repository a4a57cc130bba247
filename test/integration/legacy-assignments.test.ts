import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Assignment } from '../../shared/contracts/desired.js';
import { templateHash } from '../../functions/core/registry/template.js';
import * as schema from '../../functions/store/schema/index.js';
import { assignments } from '../../functions/store/schema/index.js';
import { migrationsFolder } from '../../functions/store/migrations-folder.js';
import type { Db } from '../../functions/store/db.js';
import { queryRows } from '../../functions/store/rows.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';

/**
 * Migration 0010 on a store the previous release left: assignments written before rollouts (0002) lack the template
 * digest and the start-up settings, which signing used to fill in on every read. The migration writes them once,
 * the digest exactly as `templateHash` computes it, so the signed state an agent receives is what it was.
 */

type Migrate = (folder: string) => Promise<void>;
type Store = { db: ReturnType<typeof drizzlePglite<typeof schema>>; migrate: Migrate; close(): Promise<void> };

const RUNTIME = { kind: 'simulated', model: 'm', ttftMs: 20, tokensPerSecond: 200, loadMs: 200, memoryMiB: 1024, failureRate: 0.05 };
const BASE = {
  deploymentId: 'dep_1',
  deploymentName: 'chat',
  model: 'm',
  deploymentGeneration: 3,
  restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 1000 },
};

/** Legacy specs, as written before rollouts: no templateHash, no startup; numbers and strings of every awkward kind. */
const LEGACY: Record<string, Record<string, unknown>> = {
  asg_plain: { ...BASE, runtime: RUNTIME, artifact: null, resources: { gpus: 1, memoryMiB: 2048 } },
  asg_artifact: { ...BASE, runtime: RUNTIME, artifact: { uri: 's3://models/m.gguf', sha256: 'a'.repeat(64) }, resources: { gpus: 0, memoryMiB: 0.5 } },
  asg_numbers: {
    ...BASE,
    runtime: { ...RUNTIME, failureRate: 1e-7, ttftMs: 0.000001, loadMs: 123456.789, memoryMiB: 1e21, tokensPerSecond: 2.5e25 },
    artifact: null,
    resources: { gpus: 0, memoryMiB: -0 },
  },
  asg_small: { ...BASE, runtime: { ...RUNTIME, failureRate: 1.2345e-10, ttftMs: 9.999999e-7 }, artifact: null, resources: { gpus: 2, memoryMiB: 100 } },
  asg_strings: {
    ...BASE,
    model: 'modèle "q"\n\t\\ \u0001 ✓ 🚀',
    runtime: { ...RUNTIME, model: 'Ünïcode/ß' },
    artifact: null,
    resources: { gpus: 0, memoryMiB: 0 },
  },
  // The fields the digest covers, absent altogether (dropped from the digest, as `undefined` is).
  asg_sparse: { runtime: { kind: 'simulated', model: 'm' } },
};

function suite(open: () => Promise<Store>) {
  let store: Store;
  let folder: string;
  let before: Map<string, Record<string, unknown>>;
  let after: Map<string, Record<string, unknown>>;

  beforeAll(async () => {
    // The store as the previous release left it: migrations up to 0009, then rows of every age in it.
    folder = await mkdtemp(join(tmpdir(), 'lnx-migrations-'));
    await cp(migrationsFolder(), folder, { recursive: true });
    const journalPath = join(folder, 'meta', '_journal.json');
    const journal = JSON.parse(await readFile(journalPath, 'utf8')) as { entries: Array<{ tag: string }> };
    journal.entries = journal.entries.filter((e) => e.tag < '0010');
    await writeFile(journalPath, JSON.stringify(journal));
    store = await open();
    await store.migrate(folder);
    const { db } = store;
    await db.execute(sql`insert into workspaces (id, name) values ('ws_1', 'default')`);
    await db.execute(sql`insert into machines (id, workspace_id, name, inventory) values ('mch_1', 'ws_1', 'gpu-1', '{}')`);
    await db.execute(
      sql`insert into deployments (id, workspace_id, name, model, runtime, restart_policy, replicas) values ('dep_1', 'ws_1', 'chat', 'm', ${JSON.stringify(RUNTIME)}::jsonb, '{}', 1)`,
    );
    const current = {
      ...BASE,
      assignmentId: 'asg_current',
      runtime: RUNTIME,
      artifact: null,
      resources: { gpus: 0, memoryMiB: 0 },
      startup: { timeoutMs: 60_000, probeIntervalMs: 500, failureThreshold: 2 },
      templateHash: 'kept-as-written',
    };
    const specs = {
      ...Object.fromEntries(Object.entries(LEGACY).map(([id, spec]) => [id, id === 'asg_sparse' ? spec : { ...spec, assignmentId: id }])),
      asg_current: current,
    };
    for (const [id, spec] of Object.entries(specs)) {
      // As text, so the stored numbers are what JSON.stringify wrote (1e-7, 1e+21), as the old writer stored them.
      await db.execute(sql`insert into assignments (id, machine_id, deployment_id, spec) values (${id}, 'mch_1', 'dep_1', ${JSON.stringify(spec)}::jsonb)`);
    }
    const read = async () =>
      new Map(
        (await db.select({ id: assignments.id, spec: assignments.spec }).from(assignments)).map((r) => [r.id, r.spec as unknown as Record<string, unknown>]),
      );
    before = await read();
    await store.migrate(migrationsFolder());
    after = await read();
  }, 60_000);

  afterAll(async () => {
    await store?.close();
    if (folder) await rm(folder, { recursive: true, force: true });
  });

  it('gives each legacy row the digest signing computed for it', () => {
    for (const id of Object.keys(LEGACY)) {
      const old = before.get(id)!;
      expect(old.templateHash, id).toBeUndefined();
      expect(after.get(id)!.templateHash, id).toBe(templateHash(old as unknown as Assignment));
    }
  });

  it('signs the same assignment as before the migration (what signing used to fill in on each read)', () => {
    // Not the sparse row nor the one with numbers past the contract's bounds: neither could ever be signed.
    for (const id of Object.keys(LEGACY).filter((id) => id !== 'asg_sparse' && id !== 'asg_numbers')) {
      const old = before.get(id)! as unknown as Assignment;
      const signedBefore = Assignment.parse({ ...old, templateHash: old.templateHash ?? templateHash(old) });
      expect(Assignment.parse(after.get(id)), id).toEqual(signedBefore);
      expect(after.get(id)!.startup, id).toEqual({ timeoutMs: 1_800_000, probeIntervalMs: 1_000, failureThreshold: 3 });
    }
  });

  it('leaves rows that already had them as they were, and its helper function behind it not at all', async () => {
    expect(after.get('asg_current')).toEqual(before.get('asg_current'));
    const [left] = await queryRows<{ n: number }>(store.db as unknown as Db, sql`select count(*)::int as n from pg_proc where proname like 'lunanexa_0010%'`);
    expect(left!.n).toBe(0);
  });
}

describe('migration 0010 on PGlite', () =>
  suite(async () => {
    const client = new PGlite();
    const db = drizzlePglite({ client, schema });
    return { db, migrate: (migrationsFolder) => migratePglite(db, { migrationsFolder }), close: () => client.close() };
  }));

describePg('migration 0010 on PostgreSQL', () =>
  suite(async () => {
    const database = await createTestDatabase();
    const pool = new pg.Pool({ connectionString: database.url, max: 2 });
    const db = drizzlePg({ client: pool, schema });
    return {
      db: db as unknown as Store['db'],
      migrate: (migrationsFolder) => migratePg(db, { migrationsFolder }),
      async close() {
        await pool.end();
        await database.drop();
      },
    };
  }),
);
