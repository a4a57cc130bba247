import { afterAll, beforeAll, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { hashSecret } from '../../functions/services/secrets.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** `npm run --silent db:bootstrap -- <args>` in the repository, as the docs tell an operator to run it. */
function bootstrap(args: string[], env: Record<string, string | undefined>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  delete childEnv.DATABASE_URL;
  for (const [key, value] of Object.entries(env)) if (value !== undefined) childEnv[key] = value;
  return new Promise((resolvePromise, reject) => {
    const child = spawn('npm', ['run', '--silent', 'db:bootstrap', ...(args.length ? ['--', ...args] : [])], { cwd: REPO, env: childEnv });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolvePromise({ code, stdout, stderr }));
  });
}

describePg('npm run db:bootstrap (first admin API token for a fresh PostgreSQL)', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let plane: TestPlane | undefined;
  let token = '';

  beforeAll(async () => {
    db = await createTestDatabase();
  });

  afterAll(async () => {
    await plane?.stop();
    await db?.drop();
  });

  async function query<T extends pg.QueryResultRow>(text: string): Promise<T[]> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return (await client.query<T>(text)).rows;
    } finally {
      await client.end();
    }
  }

  it('refuses without a usable DATABASE_URL (exit 2), never printing the URL', async () => {
    const missing = await bootstrap([], {});
    expect(missing.code).toBe(2);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toMatch(/DATABASE_URL is not set/);

    for (const value of ['not a url s3cret-pw', 'mysql://admin:s3cret-pw@db.example/app']) {
      const invalid = await bootstrap([], { DATABASE_URL: value });
      expect(invalid.code).toBe(2);
      expect(invalid.stdout).toBe('');
      expect(invalid.stderr).toMatch(/DATABASE_URL is not a/);
      expect(invalid.stderr).not.toContain('s3cret-pw');
    }

    // Well formed but nothing listens there: exit 1, and the password is not repeated.
    const unreachable = await bootstrap([], { DATABASE_URL: 'postgres://admin:s3cret-pw@127.0.0.1:1/app' });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stdout).toBe('');
    expect(unreachable.stderr).toMatch(/cannot connect to or migrate the database at DATABASE_URL/);
    expect(unreachable.stderr).not.toContain('s3cret-pw');
  });

  it('migrates a fresh database, creates the default workspace and prints one admin token, stored hashed', async () => {
    const first = await bootstrap([], { DATABASE_URL: db.url });
    expect(first.code, first.stderr).toBe(0);
    // stdout is the token and nothing else, so that TOKEN=$(npm run --silent db:bootstrap) captures it.
    expect(first.stdout).toMatch(/^lnx_[A-Za-z0-9_-]{43}\n$/);
    token = first.stdout.trim();
    expect(first.stderr.trim().split('\n')).toHaveLength(1);
    expect(first.stderr).toMatch(/save it now/);
    expect(first.stderr).not.toContain(token);

    const [migrated] = await query<{ n: number }>('select count(*)::int as n from drizzle.__drizzle_migrations');
    expect(migrated!.n).toBeGreaterThan(0);
    const workspaces = await query<{ id: string; name: string }>('select id, name from workspaces');
    expect(workspaces.map((w) => w.name)).toEqual(['default']);

    const tokens = await query<Record<string, unknown>>('select * from api_tokens');
    expect(tokens).toHaveLength(1);
    expect(tokens[0]).toMatchObject({ role: 'admin', workspace_id: workspaces[0]!.id, revoked_at: null, expires_at: null });
    expect(tokens[0]!.token_hash).toBe(await hashSecret(token));
    // Nowhere in plain text: not in the token row, not in the audit trail.
    expect(JSON.stringify(tokens)).not.toContain(token);
    expect(JSON.stringify(tokens)).not.toContain(token.slice(4));
    const audits = await query<Record<string, unknown>>('select * from audit_events');
    expect(audits.map((a) => a.action)).toEqual(['api_token.create']);
    expect(JSON.stringify(audits)).not.toContain(token.slice(4));
  });

  it('refuses a second run while an admin token is active (exit 1, says what to do), unless --force', async () => {
    const second = await bootstrap([], { DATABASE_URL: db.url });
    expect(second.code).toBe(1);
    expect(second.stdout).toBe('');
    expect(second.stderr).toMatch(/already has an active admin API token/);
    expect(second.stderr).toMatch(/--force/);
    expect(await query('select id from api_tokens')).toHaveLength(1);

    const forced = await bootstrap(['--force'], { DATABASE_URL: db.url });
    expect(forced.code, forced.stderr).toBe(0);
    const other = forced.stdout.trim();
    expect(other).toMatch(/^lnx_/);
    expect(other).not.toBe(token);
    // The first token stays valid; both are admin tokens of the one default workspace.
    const rows = await query<{ role: string; workspace_id: string }>('select role, workspace_id from api_tokens');
    expect(rows).toHaveLength(2);
    expect(new Set(rows.map((r) => `${r.role} ${r.workspace_id}`)).size).toBe(1);

    const unknownFlag = await bootstrap(['--frce'], { DATABASE_URL: db.url });
    expect(unknownFlag.code).toBe(2);
    expect(unknownFlag.stderr).toMatch(/usage: /);
  });

  it('the printed token works against the API of a control plane on that database', async () => {
    plane = await startTestPlane({ store: 'pg', databaseUrl: db.url });
    const call = (path: string, bearer: string, init: RequestInit = {}) =>
      fetch(`${plane!.url}${path}`, { ...init, headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' } });

    const machines = await call('/api/v1/machines', token);
    expect(machines.status).toBe(200);
    expect(((await machines.json()) as { data: unknown[] }).data).toEqual([]);

    const enrollment = await call('/api/v1/enrollment-tokens', token, { method: 'POST', body: JSON.stringify({ name: 'spark-01', ttlSeconds: 60 }) });
    expect(enrollment.status).toBe(201);
    expect(((await enrollment.json()) as { token: string }).token).toMatch(/^lnxe_/);

    expect((await call('/api/v1/machines', `${token}x`)).status).toBe(401);
  });
});
