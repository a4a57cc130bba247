import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { newApp } from '../../functions/api/app.js';
import { ROLE_EXTENSION } from '../../functions/api/http/guarded.js';
import { createApiToken, revokeApiToken } from '../../functions/services/api-tokens.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { addMember } from '../../functions/services/members.js';
import { roleCovers } from '../../functions/core/token-rules.js';
import { workloads } from '../../functions/store/schema/index.js';
import { queryRows } from '../../functions/store/rows.js';
import { ErrorEnvelope, Role } from '../../shared/contracts/common.js';
import { OpenAIErrorEnvelope } from '../../shared/contracts/openai.js';
import { newId } from '../../shared/ids.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { enrollTestMachine } from '../helpers/machine.js';
import { startTestPlane, type TestPlane, waitFor } from '../helpers/plane.js';

/**
 * Who may call what (docs/security.md, "Roles"; docs/operations.md, "Routes and roles"). Every route the app
 * serves under /api/v1 and /v1 is enumerated from the app itself, so a route added later is checked without
 * anyone listing it here, and a management route that declares no role (`guarded`) fails this suite. For each:
 * no token, a revoked token, a role too weak, and a token of another workspace aimed at this workspace's
 * resources; every refusal in its surface's envelope with its code, and none of them changes anything.
 */

/** Routes anyone may call: the only management route outside the OpenAPI document's operations. */
const PUBLIC = new Set(['GET /api/v1/openapi.json']);

/** Distinct names of workspace A's resources, so that an answer that leaks one is recognisable. */
const A = {
  machine: 'alpha-node',
  deployment: 'alpha-dep',
  template: 'alpha-tmpl',
  secret: 'alpha-secret',
  member: 'alpha@example.com',
  model: 'alpha-model',
  version: 'v1',
  alias: 'alpha-alias',
  run: 'alpha-run',
  swarm: 'alpha-swarm',
};

/** SHA-256 of no bytes: A's model version is one empty file, placed in the artifact store. */
const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

/** A valid upload of the Files API: a form, not JSON. */
function uploadForm(): FormData {
  const form = new FormData();
  form.append('purpose', 'user_data');
  form.append('file', new Blob(['route-auth bytes']), 'route-auth.txt');
  return form;
}

/** Valid bodies, so that what stops a request is who sends it, never what it sends. */
const BODIES: Record<string, unknown> = {
  'POST /api/v1/enrollment-tokens': { name: 'route-auth-node', ttlSeconds: 60 },
  'POST /api/v1/machines/{id}/revoke': { reason: 'route-auth' },
  'PUT /api/v1/deployments/{name}': {
    model: 'route-auth-model',
    runtime: { kind: 'simulated', model: 'route-auth-model', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
    replicas: 0,
    selector: { pool: 'none' },
    gpus: 0,
    memoryMiB: 64,
  },
  'PUT /api/v1/swarms/{name}': {
    deployment: {
      model: 'route-auth-swarm-model',
      runtime: { kind: 'simulated', model: 'route-auth-swarm-model', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
      replicas: 0,
      selector: { pool: 'none' },
    },
  },
  'PUT /api/v1/runtime-templates/{name}': {
    executable: '/opt/llama.cpp/bin/llama-server',
    executableSha256: '1'.repeat(64),
    args: ['-m', '{model_path}', '--port', '{port}'],
    params: {},
  },
  'PUT /api/v1/runtime-secrets/{name}': { value: 'route-auth-value' },
  'POST /api/v1/tokens': { name: 'route-auth', role: 'viewer' },
  'POST /api/v1/workspaces': { name: 'route-auth-ws' },
  'POST /api/v1/workspaces/current/members': { name: 'route-auth@example.com', role: 'viewer' },
  'POST /api/v1/models': { name: 'route-auth-model' },
  'POST /api/v1/models/{name}/versions': {
    version: 'route-auth',
    format: 'other',
    manifest: { files: [{ path: 'weights.bin', size: 0, sha256: EMPTY_SHA256 }] },
  },
  'POST /api/v1/models/{name}/versions/{version}/provenance': { licence: 'MIT', provenance: { source: 'route-auth' } },
  'POST /api/v1/models/{name}/versions/{version}/evaluations': { suite: 'route-auth', passed: true },
  'POST /api/v1/models/{name}/versions/{version}/approval': { decision: 'approve', reason: 'route-auth' },
  'PUT /api/v1/aliases/{alias}': { model: A.model, version: A.version, reason: 'route-auth' },
  'POST /api/v1/aliases/{alias}/rollback': { reason: 'route-auth' },
  'POST /api/v1/models/{name}/versions/{version}/promotion': { alias: A.alias, reason: 'route-auth' },
  'POST /api/v1/models/{name}/versions/{version}/release': { reason: 'route-auth' },
  'POST /api/v1/models/{name}/versions/{version}/rollback': { reason: 'route-auth' },
  'POST /api/v1/deployments/{name}/canary/gate': { name: 'route-auth', requests: 1 },
  'PUT /api/v1/workspaces/current/policy': { quota: { gpus: 1 } },
  'POST /api/v1/runs': { name: 'route-auth-run', spec: { template: A.template, workers: 1 } },
  'POST /api/v1/jobs/commands': { command: { template: A.template } },
  'POST /v1/chat/completions': { model: A.deployment, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 },
  'POST /v1/completions': { model: A.deployment, prompt: 'hi', max_tokens: 1 },
  'POST /v1/embeddings': { model: A.deployment, input: 'hi' },
  'POST /v1/jobs/{job_id}/runner/checkpoints': { attempt: 0, results: [{ row: 0, ok: true, line: '{}' }] },
  'POST /v1/jobs/{job_id}/runner/done': { attempt: 0, totalRows: 1 },
  'POST /v1/files': uploadForm(),
};

type Check = { status: number; code: string };

describe('every route refuses whoever may not call it', () => {
  let plane: TestPlane;
  let doc: { paths: Record<string, Record<string, Record<string, unknown>>> };
  /** Tokens of workspace A by role, a revoked one, and an admin token of workspace B. */
  const tokens: Partial<Record<Role, string>> = {};
  let revoked: string;
  let other: string;
  /** Path parameters naming A's resources, by the collection a route belongs to. */
  let resources: Record<string, Record<string, string>>;
  /** A's ids: an answer to B holding one has leaked A's data. */
  let markers: string[];

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    const ctx = plane.systemCtx;
    const ws = plane.workspaceId;
    for (const role of Role.options) tokens[role] = (await createApiToken({ ctx, input: { workspaceId: ws, name: `route-auth ${role}`, role } })).token;
    const doomed = await createApiToken({ ctx, input: { workspaceId: ws, name: 'route-auth revoked', role: 'admin' } });
    await revokeApiToken({ ctx, input: { workspaceId: ws, tokenId: doomed.id } });
    revoked = doomed.token;
    const spare = await createApiToken({ ctx, input: { workspaceId: ws, name: 'route-auth spare', role: 'viewer' } });

    const machine = await enrollTestMachine(plane, A.machine);
    const enrollment = await createEnrollmentToken({ ctx, input: { workspaceId: ws, name: 'alpha-unused', labels: {}, ttlSeconds: 3600 } });
    const { id: deploymentId } = await applyTestDeployment(plane, A.deployment, { pool: 'none' }, { replicas: 0 });
    await plane.ports.dataPlane.routing.refreshed();
    for (const [path, body] of [
      [`/api/v1/runtime-templates/${A.template}`, BODIES['PUT /api/v1/runtime-templates/{name}']],
      [`/api/v1/runtime-secrets/${A.secret}`, BODIES['PUT /api/v1/runtime-secrets/{name}']],
    ] as const) {
      const response = await plane.admin(path, { method: 'PUT', body: JSON.stringify(body) });
      expect(response.status, await response.text()).toBe(200);
    }
    const swarmUp = await plane.admin(`/api/v1/swarms/${A.swarm}`, { method: 'PUT', body: JSON.stringify(BODIES['PUT /api/v1/swarms/{name}']) });
    expect(swarmUp.status, await swarmUp.clone().text()).toBe(200);
    const { id: swarmId } = (await swarmUp.json()) as { id: string };
    const member = await addMember({ ctx, input: { workspaceId: ws, name: A.member, role: 'viewer' } });
    // A's model, with an approved version an alias points at, taken through the lifecycle as an operator would.
    await mkdir(join(plane.dataDir, 'artifacts', ws, A.model, A.version), { recursive: true });
    await writeFile(join(plane.dataDir, 'artifacts', ws, A.model, A.version, 'weights.bin'), '');
    const versionPath = `/api/v1/models/${A.model}/versions/${A.version}`;
    for (const [path, method, body] of [
      ['/api/v1/models', 'POST', { name: A.model }],
      [`/api/v1/models/${A.model}/versions`, 'POST', { ...(BODIES['POST /api/v1/models/{name}/versions'] as object), version: A.version }],
      [`${versionPath}/provenance`, 'POST', BODIES['POST /api/v1/models/{name}/versions/{version}/provenance']],
      [`${versionPath}/verify`, 'POST', undefined],
      [`${versionPath}/evaluations`, 'POST', BODIES['POST /api/v1/models/{name}/versions/{version}/evaluations']],
      [`${versionPath}/approval`, 'POST', BODIES['POST /api/v1/models/{name}/versions/{version}/approval']],
      [`/api/v1/aliases/${A.alias}`, 'PUT', BODIES['PUT /api/v1/aliases/{alias}']],
    ] as const) {
      const response = await plane.admin(path, { method, body: body === undefined ? undefined : JSON.stringify(body) });
      expect(response.status, `${method} ${path}: ${await response.clone().text()}`).toBeLessThan(300);
    }
    const modelVersion = (await (await plane.admin(versionPath)).json()) as { id: string; state: string };
    expect(modelVersion.state).toBe('approved');
    const workloadId = newId('workload');
    await plane.ports.store.db.insert(workloads).values({
      id: workloadId,
      workspaceId: ws,
      deploymentId,
      kind: 'chat',
      state: 'running',
      instanceId: plane.ports.instanceId,
      deadline: new Date(Date.now() + 3_600_000),
    });

    // A's run: it waits in the queue (no machine has room), which is all a route needs of it.
    const submitted = await plane.admin('/api/v1/runs', { method: 'POST', body: JSON.stringify({ name: A.run, spec: { template: A.template, workers: 1 } }) });
    expect(submitted.status, await submitted.clone().text()).toBe(201);
    const { id: runId } = (await submitted.json()) as { id: string };

    // A's file, uploaded as any client would.
    const uploaded = await fetch(`${plane.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${plane.adminToken}` }, body: uploadForm() });
    expect(uploaded.status, await uploaded.clone().text()).toBe(200);
    const { id: fileId } = (await uploaded.json()) as { id: string };
    // A's batch, over a file of its own, run to its end before any check (its runner writes its error file).
    const batchInput = new FormData();
    batchInput.append('purpose', 'batch');
    batchInput.append('file', new Blob(['not a request\n']), 'route-auth.jsonl');
    const input = (await (
      await fetch(`${plane.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${plane.adminToken}` }, body: batchInput })
    ).json()) as { id: string };
    BODIES['POST /v1/batches'] = { input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' };
    BODIES['POST /api/v1/jobs'] = { rows: { kind: 'chat', model: A.deployment }, inputFileId: input.id, format: 'jsonl' };
    const batched = await fetch(`${plane.url}/v1/batches`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(BODIES['POST /v1/batches']),
    });
    expect(batched.status, await batched.clone().text()).toBe(200);
    const { id: batchId } = (await batched.json()) as { id: string };
    await waitFor(
      async () => {
        const batch = (await (await fetch(`${plane.url}/v1/batches/${batchId}`, { headers: { authorization: `Bearer ${plane.adminToken}` } })).json()) as {
          status: string;
        };
        return batch.status === 'completed';
      },
      { timeoutMs: 30_000, what: "A's batch to complete" },
    );

    const created = await plane.admin('/api/v1/workspaces', { method: 'POST', body: JSON.stringify({ name: 'route-auth-other' }) });
    expect(created.status).toBe(201);
    other = ((await created.json()) as { adminToken: { token: string } }).adminToken.token;

    resources = {
      machines: { id: machine.machineId, assignmentId: newId('assignment') },
      workloads: { id: workloadId },
      deployments: { name: A.deployment },
      'runtime-templates': { name: A.template },
      'runtime-secrets': { name: A.secret },
      tokens: { id: spare.id },
      'enrollment-tokens': { id: enrollment.id },
      workspaces: { id: member.id },
      models: { name: A.model, version: A.version },
      aliases: { alias: A.alias },
      runs: { id: runId, rank: '0' },
      files: { file_id: fileId },
      batches: { batch_id: batchId },
      jobs: { job_id: batchId, id: batchId },
      swarms: { name: A.swarm },
    };
    markers = [ws, machine.machineId, deploymentId, workloadId, spare.id, member.id, modelVersion.id, enrollment.id, runId, fileId, batchId, swarmId];
    doc = (await (await fetch(`${plane.url}/api/v1/openapi.json`)).json()) as typeof doc;
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  /** The routes the app serves, as `METHOD /path/{param}`, enumerated from the app (not from a list here). */
  const servedRoutes = () =>
    [
      ...new Set(
        newApp(plane.ports)
          .routes.filter((r) => r.method !== 'ALL' && (r.path.startsWith('/api/v1/') || r.path.startsWith('/v1/')))
          .map((r) => `${r.method} ${r.path.replace(/:([A-Za-z0-9_]+)/g, '{$1}')}`),
      ),
    ].sort();

  /** The role a route needs, from its OpenAPI operation (`/v1` declares inference, the lowest: every role may call it). */
  const roleOf = (route: string): Role | 'public' | undefined => {
    if (PUBLIC.has(route)) return 'public';
    const [method, path] = route.split(' ') as [string, string];
    const declared = doc.paths[path.startsWith('/v1/') ? path : path.slice('/api/v1'.length)]?.[method.toLowerCase()]?.[ROLE_EXTENSION];
    return Role.safeParse(declared).success ? (declared as Role) : undefined;
  };

  /** A's state, table by table: every table with a workspace column, but the audit log (refusals may be audited). */
  const stateOfA = async (): Promise<string> => {
    await plane.ports.dataPlane.workloads.flush();
    const tables = await queryRows<{ table_name: string }>(
      plane.ports.store.db,
      sql`select table_name from information_schema.columns where table_schema = 'public' and column_name = 'workspace_id' and table_name <> 'audit_events' order by table_name`,
    );
    const parts: string[] = [];
    for (const { table_name: table } of tables) {
      const [row] = await queryRows<{ digest: string | null }>(
        plane.ports.store.db,
        sql`select md5(string_agg(t::text, '|' order by t::text)) as digest from ${sql.identifier(table)} t where workspace_id = ${plane.workspaceId}`,
      );
      parts.push(`${table}:${row?.digest ?? '-'}`);
    }
    // The `/v1` windows; a management request is counted whatever its answer (`api:`), and a refusal by role too
    // (`denied:`): bookkeeping of the refusal itself, as its audit entry is (docs/security.md, "Rate limits").
    const [windows] = await queryRows<{ digest: string | null }>(
      plane.ports.store.db,
      sql`select md5(string_agg(t::text, '|' order by t::text)) as digest from token_rate_windows t where t.token_id not like 'api:%' and t.token_id not like 'denied:%'`,
    );
    return `${parts.join(' ')} windows:${windows?.digest ?? '-'}`;
  };

  const fill = (route: string, params: Record<string, string>) =>
    route.split(' ')[1]!.replace(/\{(\w+)\}/g, (_, name: string) => {
      const value = params[name];
      if (value === undefined) throw new Error(`${route}: no resource of workspace A for {${name}}: add one to \`resources\``);
      return value;
    });

  /** The parameters of A's resource a route names, by the collection right after the surface's prefix. */
  const paramsOf = (route: string) => {
    const segments = route.split(' ')[1]!.split('/');
    return resources[segments[segments[1] === 'api' ? 3 : 2]!] ?? {};
  };

  const call = async (route: string, token: string | undefined) => {
    const [method] = route.split(' ') as [string];
    const body = BODIES[route];
    const headers: Record<string, string> = {};
    if (token) headers.authorization = `Bearer ${token}`;
    const form = body instanceof FormData;
    if (body !== undefined && !form) headers['content-type'] = 'application/json';
    const path = fill(route, paramsOf(route));
    const response = await fetch(`${plane.url}${path}`, { method, headers, body: body === undefined ? undefined : form ? body : JSON.stringify(body) });
    return { path, status: response.status, text: await response.text() };
  };

  /** The error code of an answer in its surface's envelope, or a description of what is wrong with it. */
  const codeOf = (route: string, text: string): string => {
    const openai = route.split(' ')[1]!.startsWith('/v1/');
    try {
      const json: unknown = JSON.parse(text);
      if (openai) return OpenAIErrorEnvelope.parse(json).error.code ?? 'null';
      return ErrorEnvelope.parse(json).error.code;
    } catch {
      return `not in the ${openai ? 'OpenAI' : 'management'} envelope: ${text.slice(0, 200)}`;
    }
  };

  const expectRefused = async (route: string, token: string | undefined, expected: Check, what: string) => {
    const answer = await call(route, token);
    expect({ status: answer.status, code: codeOf(route, answer.text) }, `${route} ${what}: ${answer.text.slice(0, 300)}`).toEqual(expected);
  };

  it('finds the routes, and every management route declares the role it needs', () => {
    const routes = servedRoutes();
    expect(routes.length).toBeGreaterThan(30);
    expect(routes.filter((route) => roleOf(route) === undefined)).toEqual([]);
  });

  it('answers no token and a revoked token with 401, and a role too weak with 403, changing nothing', async () => {
    const before = await stateOfA();
    for (const route of servedRoutes()) {
      const role = roleOf(route);
      if (role === 'public' || role === undefined) continue;
      const openai = route.split(' ')[1]!.startsWith('/v1/');
      await expectRefused(route, undefined, { status: 401, code: openai ? 'missing_api_key' : 'unauthorized' }, 'without a token');
      await expectRefused(route, revoked, { status: 401, code: openai ? 'invalid_api_key' : 'invalid_token' }, 'with a revoked token');
      for (const weaker of Role.options.filter((r) => !roleCovers(r, role))) {
        await expectRefused(route, tokens[weaker], { status: 403, code: 'forbidden' }, `with a ${weaker} token (needs ${role})`);
      }
      expect(await stateOfA(), `${route}: a refusal changed workspace A`).toBe(before);
    }
  });

  it("never shows another workspace's resources, nor acts on them", async () => {
    // Upserts by name (PUT) act in the caller's own workspace: they run last, so that what they create in B does
    // not stand in for A's resource in the checks of the other routes.
    const routes = servedRoutes()
      .filter((route) => roleOf(route) !== 'public')
      .sort((a, b) => Number(a.startsWith('PUT ')) - Number(b.startsWith('PUT ')));
    for (const route of routes) {
      const before = await stateOfA();
      const [method, path] = route.split(' ') as [string, string];
      const answer = await call(route, other);
      const names = path.includes('{');
      if (path.startsWith('/v1/') && !names) {
        // A's model is unknown to B: the answer an unknown model gets; B's lists are its own, and its upload its own
        // file; A's file is unknown to B, so a batch over it is refused as a missing file.
        if (route === 'POST /v1/batches')
          expect({ status: answer.status, code: codeOf(route, answer.text) }, `${route}: ${answer.text}`).toEqual({ status: 404, code: 'not_found' });
        else if (method === 'POST' && route !== 'POST /v1/files')
          expect({ status: answer.status, code: codeOf(route, answer.text) }, `${route}: ${answer.text}`).toEqual({ status: 404, code: 'model_not_found' });
        else {
          expect(answer.status, route).toBe(200);
          expect(answer.text, route).not.toContain(A.deployment);
        }
      } else if (names && method !== 'PUT') {
        expect({ status: answer.status, code: codeOf(route, answer.text) }, `${route}: ${answer.text}`).toEqual({ status: 404, code: 'not_found' });
      } else {
        expect(answer.status, `${route}: ${answer.text}`).toBeLessThan(500);
        if (method === 'GET') expect(answer.status, route).toBe(200);
      }
      // An id the request itself named may be repeated in its 404; any other of A's is a leak.
      const leaks = method === 'PUT' ? [] : markers.filter((marker) => !answer.path.includes(marker) && answer.text.includes(marker));
      expect(leaks, `${route} shows workspace A's ${leaks.join(', ')}: ${answer.text.slice(0, 300)}`).toEqual([]);
      expect(await stateOfA(), `${route}: another workspace's call changed workspace A`).toBe(before);
    }
  });

  it("answers A's own tokens differently, so that B's 404s are about tenancy, not missing fixtures", async () => {
    for (const route of servedRoutes().filter((r) => r.startsWith('GET ') && r.includes('{'))) {
      if (route.includes('/logs')) continue; // a log tail needs the machine's stream: 409 no_stream, still not 404
      if (route.includes('/runner')) continue; // a runner's routes answer its job's current runner token only
      const answer = await call(route, tokens.admin);
      expect(answer.status, `${route}: ${answer.text}`).toBe(200);
    }
    // A's model exists for A: whatever it answers (no replica serves it), it is not "unknown model".
    const chat = await call('POST /v1/chat/completions', tokens.inference);
    expect(codeOf('POST /v1/chat/completions', chat.text)).not.toBe('model_not_found');
    const models = await call('GET /v1/models', tokens.inference);
    expect(models.text).toContain(A.deployment);
  });

  it('matches the "Routes and roles" table of docs/operations.md', async () => {
    const text = await readFile(new URL('../../docs/operations.md', import.meta.url), 'utf8');
    const section = text.slice(text.indexOf('## Routes and roles'));
    const table = section.slice(0, section.indexOf('\n## ') > 0 ? section.indexOf('\n## ') : undefined);
    const documented = [...table.matchAll(/^\| `([A-Z]+) ([^`]+)` +\| (\w+) +\|/gm)].map((m) => `${m[1]} ${m[2]} ${m[3]}`).sort();
    const declared = servedRoutes()
      .map((route) => `${route} ${roleOf(route)}`)
      .sort();
    expect(documented).toEqual(declared);
  });
});
