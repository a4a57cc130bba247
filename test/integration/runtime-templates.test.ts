import { cp, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, isNull, sql } from 'drizzle-orm';
import { decodeJwt } from 'jose';
import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import { migrate } from 'drizzle-orm/pglite/migrator';
import * as schema from '../../functions/store/schema/index.js';
import { assignments, auditEvents, deployments, machines, runtimeSecrets } from '../../functions/store/schema/index.js';
import { migrationsFolder } from '../../functions/store/migrations-folder.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { signDesiredState } from '../../functions/services/streams.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { startStartingMachine, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';

const SHA_1 = '1'.repeat(64);
const SHA_2 = '2'.repeat(64);
/** The value that must never come back: not from the API, not from the audit log, not from a stored row. */
const SECRET = 'hf_TopSecret_9f8e7d6c5b4a';

const VLLM = {
  description: 'vLLM OpenAI-compatible server',
  executable: '/opt/vllm/bin/vllm',
  executableSha256: SHA_1,
  args: [
    'serve',
    '{model_path}',
    '--served-model-name',
    '{served_name}',
    '--host',
    '127.0.0.1',
    '--port',
    '{port}',
    '--max-model-len',
    '{max_model_len}',
    '--dtype',
    '{dtype}',
    '{enforce_eager}',
  ],
  params: {
    max_model_len: { type: 'integer', min: 256, max: 131072 },
    dtype: { type: 'string', pattern: '^(auto|half|bfloat16)$', default: 'auto' },
    enforce_eager: { type: 'boolean', flag: '--enforce-eager', default: false },
  },
  env: ['HF_TOKEN', 'VLLM_LOGGING_LEVEL'],
  healthPath: '/health',
};

const LLAMA = {
  executable: '/opt/llama.cpp/bin/llama-server',
  executableSha256: SHA_1,
  args: ['-m', '{model_path}', '--host', '127.0.0.1', '--port', '{port}', '--ctx-size', '{ctx}'],
  params: { ctx: { type: 'integer', min: 512, max: 32768, default: 4096 } },
};

/**
 * The runtime-template registry and runtime secrets over the management API: admins register, operators
 * deploy with params, the controller signs the rendered argv (and a secret's value only into the runtime that
 * names it), and the secret's value leaves through nothing else.
 */
function registrySuite(store: StoreKind) {
  let plane: TestPlane;
  let operator: string;
  let viewer: string;
  let node: { machine: TestMachine; stop(): Promise<void> };
  /** Every body an API call answered, checked at the end for the secret's value. */
  const answers: string[] = [];

  const call = async (method: string, path: string, body?: unknown, token = plane.adminToken) => {
    const response = await fetch(`${plane.url}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    answers.push(text);
    return { status: response.status, body: JSON.parse(text) as Record<string, any> };
  };
  const deployment = (runtime: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    model: 'llm',
    runtime,
    replicas: 1,
    selector: { site: 'lab' },
    memoryMiB: 1024,
    ...extra,
  });
  /** The live assignments of a deployment, as the controller stored them. */
  const liveAssignments = async (deploymentId: string) =>
    (
      await plane.systemCtx.db
        .select({ id: assignments.id, spec: assignments.spec })
        .from(assignments)
        .where(and(eq(assignments.deploymentId, deploymentId), isNull(assignments.removedAt)))
    ).sort((a, b) => (a.id < b.id ? -1 : 1));
  /** The machine's desired state exactly as the agent receives it. */
  const signedAssignments = async () => {
    const { jws } = await signDesiredState({ ctx: plane.systemCtx, input: { machineId: node.machine.machineId } });
    return (decodeJwt(jws) as unknown as { assignments: Assignment[] }).assignments;
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store });
    operator = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'operator', role: 'operator' } })).token;
    viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
    node = await startStartingMachine(plane, 'gpu-1', { site: 'lab' });
  });
  afterAll(async () => {
    await node?.stop();
    await plane?.stop();
  });

  it('the Node control plane keeps its secret key in the data dir, readable by its owner only', async () => {
    const info = await stat(join(plane.dataDir, 'secret.key'));
    expect(info.mode & 0o777).toBe(0o600);
  });

  it('admins register templates; operators and viewers read them, and cannot write (403)', async () => {
    const created = await call('PUT', '/runtime-templates/vllm', VLLM);
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ name: 'vllm', executable: '/opt/vllm/bin/vllm', executableSha256: SHA_1, env: ['HF_TOKEN', 'VLLM_LOGGING_LEVEL'] });
    expect((await call('PUT', '/runtime-templates/llama', LLAMA)).status).toBe(200);

    for (const token of [operator, viewer]) {
      const list = await call('GET', '/runtime-templates', undefined, token);
      expect(list.status).toBe(200);
      expect(list.body.data.map((t: { name: string }) => t.name)).toEqual(['llama', 'vllm']);
      expect((await call('GET', '/runtime-templates/vllm', undefined, token)).body).toMatchObject({ name: 'vllm', params: VLLM.params });
      const refused = await call('PUT', '/runtime-templates/mine', { ...LLAMA, executable: '/bin/sh' }, token);
      expect(refused).toMatchObject({ status: 403, body: { error: { code: 'forbidden' } } });
      expect((await call('DELETE', '/runtime-templates/llama', undefined, token)).status).toBe(403);
    }
    expect((await call('GET', '/runtime-templates/mine')).status).toBe(404);
    expect((await call('GET', '/runtime-templates/nothing-here')).body.error.code).toBe('not_found');
    expect((await fetch(`${plane.url}/api/v1/runtime-templates`)).status).toBe(401);
  });

  it('bad templates are 400 naming what is wrong, in the error envelope', async () => {
    const bad = async (spec: unknown) => {
      const answer = await call('PUT', '/runtime-templates/bad', spec);
      expect(answer.status).toBe(400);
      expect(answer.body.error).toMatchObject({ code: 'validation_failed', requestId: expect.any(String) });
      return answer.body.error.message as string;
    };
    expect(await bad({ ...LLAMA, args: ['--x', '{command}', '{ctx}'] })).toMatch(/^unknown placeholder \{command\}: .* at args\.1$/);
    expect(await bad({ ...LLAMA, params: { ctx: { type: 'integer', min: 1, max: 8, default: 9 } } })).toMatch(/default of ctx must be between 1 and 8/);
    expect(await bad({ ...LLAMA, args: ['{ctx}', '{v}'], params: { ...LLAMA.params, v: { type: 'string', pattern: '[a-z]+' } } })).toMatch(/anchored/);
    expect(await bad({ ...LLAMA, args: ['{ctx}', '{v}'], params: { ...LLAMA.params, v: { type: 'string', pattern: '^([a-z]$' } } })).toMatch(
      /does not compile/,
    );
    expect(await bad({ ...LLAMA, env: ['LD_PRELOAD'] })).toMatch(/LD_PRELOAD cannot be allowed/);
    expect(await bad({ ...LLAMA, executable: 'llama-server' })).toMatch(/absolute path/);
    expect(await bad({ ...LLAMA, executableSha256: 'abc' })).toMatch(/executableSha256/);
    expect(await bad({ ...LLAMA, command: ['/bin/sh'], args: 'x' })).toMatch(/args/);
    expect((await call('GET', '/runtime-templates/bad')).status).toBe(404);
    expect((await call('PUT', '/runtime-templates/Not_A_Name', LLAMA)).status).toBe(400);
  });

  it('runtime secrets are write-only: admins write them, everyone sees names and times only', async () => {
    const written = await call('PUT', '/runtime-secrets/hf-token', { value: SECRET, feeds: [{ template: 'vllm', env: 'HF_TOKEN' }] });
    expect(written.status).toBe(200);
    expect(Object.keys(written.body).sort()).toEqual(['createdAt', 'feeds', 'name', 'updatedAt']);
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: 'x' }, operator)).status).toBe(403);
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: '' })).status).toBe(400);
    for (const token of [plane.adminToken, operator, viewer]) {
      const list = await call('GET', '/runtime-secrets', undefined, token);
      expect(list.status).toBe(200);
      expect(list.body.data).toEqual([
        { name: 'hf-token', feeds: [{ template: 'vllm', env: 'HF_TOKEN' }], createdAt: expect.any(String), updatedAt: expect.any(String) },
      ]);
    }
    // There is no route that reads one.
    expect((await call('GET', '/runtime-secrets/hf-token')).status).toBe(404);
  });

  let vllmId: string;

  it('an operator deploys with params; the signed assignment carries the rendered argv, and the secret only for that runtime', async () => {
    const applied = await call(
      'PUT',
      '/deployments/chat',
      deployment({
        kind: 'template',
        template: 'vllm',
        params: { max_model_len: 8192, enforce_eager: true },
        env: { HF_TOKEN: { secret: 'hf-token' }, VLLM_LOGGING_LEVEL: { value: 'INFO' } },
      }),
      operator,
    );
    expect(applied.status).toBe(200);
    vllmId = applied.body.id;
    // Stored and shown as given: params, and the secret by name.
    expect(applied.body.runtime).toEqual({
      kind: 'template',
      template: 'vllm',
      params: { max_model_len: 8192, enforce_eager: true },
      env: { HF_TOKEN: { secret: 'hf-token' }, VLLM_LOGGING_LEVEL: { value: 'INFO' } },
    });
    expect((await call('PUT', '/deployments/small', deployment({ kind: 'template', template: 'llama' }, { model: 'small' }), operator)).status).toBe(200);

    const [stored] = await liveAssignments(vllmId);
    const expected = {
      kind: 'template',
      template: 'vllm',
      executable: '/opt/vllm/bin/vllm',
      executableSha256: SHA_1,
      args: [
        'serve',
        '{model_path}',
        '--served-model-name',
        '{served_name}',
        '--host',
        '127.0.0.1',
        '--port',
        '{port}',
        '--max-model-len',
        '8192',
        '--dtype',
        'auto',
        '--enforce-eager',
      ],
      healthPath: '/health',
    };
    // At rest, the assignment holds the secret by reference only.
    expect(stored!.spec.runtime).toEqual({ ...expected, env: { VLLM_LOGGING_LEVEL: 'INFO' } });
    expect(JSON.stringify(stored!.spec)).not.toContain(SECRET);

    const signed = await signedAssignments();
    const chat = signed.find((a) => a.deploymentName === 'chat')!;
    const small = signed.find((a) => a.deploymentName === 'small')!;
    expect(chat.runtime).toEqual({ ...expected, env: { VLLM_LOGGING_LEVEL: 'INFO', HF_TOKEN: SECRET } });
    expect(chat).not.toHaveProperty('secretEnv');
    expect(chat.templateHash).toBe(stored!.spec.templateHash);
    expect(small.runtime).toEqual({
      kind: 'template',
      template: 'llama',
      executable: '/opt/llama.cpp/bin/llama-server',
      executableSha256: SHA_1,
      args: ['-m', '{model_path}', '--host', '127.0.0.1', '--port', '{port}', '--ctx-size', '4096'],
      env: {},
      healthPath: '/health',
    });
    expect(JSON.stringify(small)).not.toContain(SECRET);
  });

  it('refuses what the template does not allow with 400 naming it, and changes nothing', async () => {
    const before = await liveAssignments(vllmId);
    const refused = async (runtime: Record<string, unknown>, code: string, message: RegExp) => {
      const answer = await call(
        'PUT',
        '/deployments/chat',
        deployment({ kind: 'template', template: 'vllm', params: { max_model_len: 8192 }, ...runtime }),
        operator,
      );
      expect(answer.status).toBe(400);
      expect(answer.body.error.code).toBe(code);
      expect(answer.body.error.message).toMatch(message);
    };
    await refused(
      { env: { LD_PRELOAD: { value: '/tmp/evil.so' } } },
      'validation_failed',
      /LD_PRELOAD is not one the template allows.* at runtime\.env\.LD_PRELOAD/,
    );
    await refused({ env: { PATH: { value: '/tmp' } } }, 'validation_failed', /PATH is not one the template allows/);
    await refused(
      { params: { max_model_len: 100 } },
      'validation_failed',
      /param "max_model_len" must be between 256 and 131072, not 100 at runtime\.params\.max_model_len/,
    );
    await refused({ params: {} }, 'validation_failed', /missing param "max_model_len"/);
    await refused({ params: { max_model_len: 8192, dtype: 'auto --trust-remote-code' } }, 'validation_failed', /param "dtype" must match/);
    await refused({ params: { max_model_len: 8192, dtype: '$(id)' } }, 'validation_failed', /param "dtype" must match/);
    await refused({ params: { max_model_len: 8192, dtype: '{port}' } }, 'validation_failed', /placeholder/);
    await refused({ params: { max_model_len: 8192, trust_remote_code: true } }, 'validation_failed', /unknown param "trust_remote_code"/);
    await refused({ params: { max_model_len: '8192' } }, 'validation_failed', /must be an integer/);
    await refused({ template: 'nothing' }, 'unknown_template', /runtime template nothing is not registered at runtime\.template/);
    await refused({ env: { HF_TOKEN: { secret: 'nope' } } }, 'unknown_secret', /runtime secret nope does not exist at runtime\.env\.HF_TOKEN/);
    // The free-form process runtime is gone from the contract.
    const process = await call('PUT', '/deployments/chat', deployment({ kind: 'process', command: ['/bin/sh', '-c', 'cat machine-key.jwk'] }), operator);
    expect(process.status).toBe(400);
    expect(await liveAssignments(vllmId)).toEqual(before);
    expect((await call('GET', '/deployments/chat')).body.generation).toBe(1);
  });

  it('re-registering a template with a new executable digest rolls the deployments that use it, and only those', async () => {
    const chatBefore = await liveAssignments(vllmId);
    const small = (await call('GET', '/deployments/small')).body;
    const smallBefore = await liveAssignments(small.id);

    // A description is not part of what runs: nothing rolls.
    expect((await call('PUT', '/runtime-templates/vllm', { ...VLLM, description: 'vLLM 0.9' })).status).toBe(200);
    expect(await liveAssignments(vllmId)).toEqual(chatBefore);

    expect((await call('PUT', '/runtime-templates/vllm', { ...VLLM, executableSha256: SHA_2 })).status).toBe(200);
    const chatAfter = await liveAssignments(vllmId);
    expect(chatAfter).toHaveLength(1);
    expect(chatAfter[0]!.spec.templateHash).not.toBe(chatBefore[0]!.spec.templateHash);
    expect(chatAfter[0]!.spec.runtime).toMatchObject({ executableSha256: SHA_2 });
    // The other template's deployment is untouched: same assignment, same digest.
    expect(await liveAssignments(small.id)).toEqual(smallBefore);
    // The deployment itself did not change: same generation, and its status counts the new replica as current.
    const detail = (await call('GET', '/deployments/chat')).body;
    expect(detail.generation).toBe(1);
    expect(
      detail.status.replicas.filter((r: { desired: boolean }) => r.desired).map((r: { assignmentId: string; current: boolean }) => [r.assignmentId, r.current]),
    ).toEqual([[chatAfter[0]!.id, true]]);

    // Re-registering the same spec changes nothing.
    expect((await call('PUT', '/runtime-templates/vllm', { ...VLLM, executableSha256: SHA_2 })).status).toBe(200);
    expect(await liveAssignments(vllmId)).toEqual(chatAfter);
  });

  it('rotating a secret rolls the replicas that use it; writing the same value again does not', async () => {
    const before = await liveAssignments(vllmId);
    const small = (await call('GET', '/deployments/small')).body;
    const smallBefore = await liveAssignments(small.id);
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: SECRET })).status).toBe(200);
    expect(await liveAssignments(vllmId)).toEqual(before);

    expect((await call('PUT', '/runtime-secrets/hf-token', { value: `${SECRET}-rotated` })).status).toBe(200);
    const after = await liveAssignments(vllmId);
    expect(after[0]!.spec.templateHash).not.toBe(before[0]!.spec.templateHash);
    expect(await liveAssignments(small.id)).toEqual(smallBefore);
    const chat = (await signedAssignments()).find((a) => a.deploymentName === 'chat')!;
    expect(chat.runtime.kind === 'template' && chat.runtime.env.HF_TOKEN).toBe(`${SECRET}-rotated`);
    // Back to the first value for the leak checks below.
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: SECRET })).status).toBe(200);
  });

  it('a template change that would break a live deployment is refused with 409 naming it', async () => {
    const answer = await call('PUT', '/runtime-templates/vllm', { ...VLLM, executableSha256: SHA_2, env: ['VLLM_LOGGING_LEVEL'] });
    expect(answer.status).toBe(409);
    expect(answer.body.error).toMatchObject({ code: 'conflict', message: expect.stringMatching(/deployment chat would no longer render/) });
    const tighter = await call('PUT', '/runtime-templates/vllm', {
      ...VLLM,
      executableSha256: SHA_2,
      params: { ...VLLM.params, max_model_len: { type: 'integer', min: 256, max: 4096 } },
    });
    expect(tighter.status).toBe(409);
    expect((await call('GET', '/runtime-templates/vllm')).body.env).toEqual(['HF_TOKEN', 'VLLM_LOGGING_LEVEL']);
  });

  it('a template or secret in use cannot be deleted (409); once unused it can', async () => {
    expect(await call('DELETE', '/runtime-templates/vllm')).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict', details: { deployments: ['chat'] } } },
    });
    expect(await call('DELETE', '/runtime-secrets/hf-token')).toMatchObject({
      status: 409,
      body: { error: { code: 'conflict', details: { deployments: ['chat'] } } },
    });
    expect((await call('DELETE', '/runtime-secrets/hf-token', undefined, operator)).status).toBe(403);
    expect((await call('DELETE', '/runtime-templates/nothing-here')).status).toBe(404);
    expect((await call('DELETE', '/runtime-secrets/nothing-here')).status).toBe(404);

    // Moving the deployment off the secret frees it; deleting the deployment frees the template.
    expect((await call('PUT', '/deployments/chat', deployment({ kind: 'template', template: 'vllm', params: { max_model_len: 8192 } }), operator)).status).toBe(
      200,
    );
    expect((await signedAssignments()).some((a) => a.runtime.kind === 'template' && 'HF_TOKEN' in a.runtime.env)).toBe(false);
    expect(await call('DELETE', '/runtime-secrets/hf-token')).toMatchObject({ status: 200, body: { name: 'hf-token', deleted: true } });
    expect((await call('DELETE', '/deployments/chat', undefined, operator)).status).toBe(200);
    expect(await call('DELETE', '/runtime-templates/vllm')).toMatchObject({ status: 200, body: { name: 'vllm', deleted: true } });
    expect((await call('GET', '/runtime-templates')).body.data.map((t: { name: string }) => t.name)).toEqual(['llama']);
    expect((await call('GET', '/runtime-secrets')).body.data).toEqual([]);
  });

  it('the secret value appears in no API answer, audit row or stored row; its writes are audited', async () => {
    answers.push(JSON.stringify((await call('GET', '/deployments')).body), JSON.stringify((await call('GET', `/machines/${node.machine.machineId}`)).body));
    answers.push(await (await fetch(`${plane.url}/api/v1/openapi.json`)).text());
    for (const answer of answers) expect(answer).not.toContain(SECRET);

    const audit = await plane.systemCtx.db.select().from(auditEvents).where(eq(auditEvents.workspaceId, plane.workspaceId));
    expect(JSON.stringify(audit)).not.toContain(SECRET);
    // Writing the same value again is audited as any write (it rolls nothing, but the log tells no guess apart).
    expect(audit.filter((a) => a.action.startsWith('runtime_secret.')).map((a) => a.action)).toEqual([
      'runtime_secret.create',
      'runtime_secret.rotate',
      'runtime_secret.rotate',
      'runtime_secret.rotate',
      'runtime_secret.delete',
    ]);
    expect(audit.filter((a) => a.action.startsWith('runtime_template.')).map((a) => [a.action, a.target])).toEqual(
      expect.arrayContaining([
        ['runtime_template.create', 'vllm'],
        ['runtime_template.update', 'vllm'],
        ['runtime_template.delete', 'vllm'],
      ]),
    );
    expect(JSON.stringify(await plane.systemCtx.db.select().from(assignments))).not.toContain(SECRET);
    expect(JSON.stringify(await plane.systemCtx.db.select().from(runtimeSecrets))).not.toContain(SECRET);
  });

  it('the OpenAPI document lists the registry routes', async () => {
    const doc = (await (await fetch(`${plane.url}/api/v1/openapi.json`)).json()) as { paths: Record<string, unknown> };
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/runtime-templates', '/runtime-templates/{name}', '/runtime-secrets', '/runtime-secrets/{name}']),
    );
  });
}

describe('runtime templates and secrets (PGlite)', () => registrySuite('pglite'));
describePg('runtime templates and secrets (PostgreSQL)', () => registrySuite('pg'));

describe('upgrading a store whose deployments ran the removed process runtime', () => {
  it('retires them and their replicas (their machines get a new desired state), with an audit row', async () => {
    // The store as the previous release left it: migrations up to 0002, a process deployment placed on a machine.
    const folder = await mkdtemp(join(tmpdir(), 'lnx-migrations-'));
    await cp(migrationsFolder(), folder, { recursive: true });
    const journalPath = join(folder, 'meta', '_journal.json');
    const journal = JSON.parse(await readFile(journalPath, 'utf8')) as { entries: Array<{ tag: string }> };
    journal.entries = journal.entries.filter((e) => e.tag < '0003');
    await writeFile(journalPath, JSON.stringify(journal));
    const client = new PGlite();
    const db = drizzle({ client, schema });
    try {
      await migrate(db, { migrationsFolder: folder });
      await db.execute(sql`insert into workspaces (id, name) values ('ws_1', 'default')`);
      await db.execute(sql`insert into machines (id, workspace_id, name, inventory, desired_gen) values ('mch_1', 'ws_1', 'gpu-1', '{}', 4)`);
      const legacy = {
        kind: 'process',
        command: ['/bin/sh', '-c', 'cat /var/lib/lunanexa-agent/machine-key.jwk'],
        env: {},
        healthPath: '/health',
        digest: null,
      };
      for (const [id, runtime] of [
        ['dep_process', legacy],
        ['dep_sim', { kind: 'simulated', model: 'm' }],
      ] as const) {
        await db.execute(
          sql`insert into deployments (id, workspace_id, name, model, runtime, restart_policy, replicas) values (${id}, 'ws_1', ${id}, 'm', ${JSON.stringify(runtime)}::jsonb, '{}', 1)`,
        );
        await db.execute(
          sql`insert into assignments (id, machine_id, deployment_id, spec) values (${`asg_${id}`}, 'mch_1', ${id}, ${JSON.stringify({ runtime })}::jsonb)`,
        );
      }

      await migrate(db, { migrationsFolder: migrationsFolder() });

      const rows = await db.select({ id: deployments.id, deletedAt: deployments.deletedAt }).from(deployments).orderBy(deployments.id);
      expect(rows.map((r) => [r.id, r.deletedAt !== null])).toEqual([
        ['dep_process', true],
        ['dep_sim', false],
      ]);
      const placed = await db.select({ id: assignments.id, removedAt: assignments.removedAt }).from(assignments).orderBy(assignments.id);
      expect(placed.map((r) => [r.id, r.removedAt !== null])).toEqual([
        ['asg_dep_process', true],
        ['asg_dep_sim', false],
      ]);
      expect((await db.select({ gen: machines.desiredGen }).from(machines))[0]!.gen).toBe(5);
      const audit = await db.select().from(auditEvents);
      expect(audit).toMatchObject([{ action: 'deployment.delete', target: 'dep_process', actor: 'system', details: { name: 'dep_process' } }]);
    } finally {
      await client.close();
      await rm(folder, { recursive: true, force: true });
    }
  });
});
