import { createHash } from 'node:crypto';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuditPage } from '../../shared/contracts/audit.js';
import type { AliasView, Manifest, ModelDetail, VersionView } from '../../shared/contracts/registry.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { verifyVersion } from '../../functions/services/version-moves.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * The model registry through /api/v1 on each store (docs/registry.md): a version's lifecycle from candidate to
 * approved with its files verified in the local artifact store, what a tampered, missing or escaping file does to
 * it, the lifecycle's refusals, who may decide, aliases and their rollback, and tenancy.
 */

/** A small Hugging Face-style folder: three files, one in a subfolder. */
const FOLDER: Record<string, Buffer> = {
  'config.json': Buffer.from('{"architectures":["LlamaForCausalLM"],"hidden_size":64}'),
  'model.safetensors': Buffer.from(Array.from({ length: 200_000 }, (_, i) => (i * 31) & 0xff)),
  'tokenizer/tokenizer.json': Buffer.from('{"version":"1.0","model":{"type":"BPE"}}'),
};

const MANIFEST: Manifest = {
  files: Object.entries(FOLDER).map(([path, bytes]) => ({ path, size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') })),
};
const TOTAL = Object.values(FOLDER).reduce((sum, b) => sum + b.length, 0);

type Answer<T> = { status: number; body: T & { error?: { code: string; message: string } } };

function registrySuite(kind: StoreKind) {
  let plane: TestPlane;
  let admin: { id: string; token: string };
  let operator: { id: string; token: string };
  let other: string;

  const call = async <T = unknown>(token: string, method: string, path: string, body?: unknown): Promise<Answer<T>> => {
    const response = await fetch(`${plane.url}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Answer<T>['body'] };
  };
  const ok = async <T>(answer: Promise<Answer<T>>, status = 200): Promise<T> => {
    const { status: got, body } = await answer;
    expect(got, JSON.stringify(body)).toBe(status);
    return body;
  };

  /** Writes a version's folder into the local artifact store, as an operator copies it there. */
  const place = async (model: string, version: string, files: Record<string, Buffer>) => {
    const root = join(plane.dataDir, 'artifacts', plane.workspaceId, model, version);
    await rm(root, { recursive: true, force: true });
    for (const [path, bytes] of Object.entries(files)) {
      await mkdir(dirname(join(root, path)), { recursive: true });
      await writeFile(join(root, path), bytes);
    }
    return root;
  };

  const step = (model: string, version: string, what: string) => `/models/${model}/versions/${version}/${what}`;
  const PROVENANCE = { licence: 'Apache-2.0', provenance: { source: 'huggingface:acme/tiny-llama', revision: '3f2a9c1' } };
  const PASSED = { suite: 'smoke', passed: true, metrics: { accuracy: 0.91, p95_ms: 840 } };

  /** Registers a version and takes it through the lifecycle to approved. */
  const approvedVersion = async (model: string, version: string): Promise<VersionView> => {
    await place(model, version, FOLDER);
    await ok(call(operator.token, 'POST', `/models/${model}/versions`, { version, format: 'safetensors', manifest: MANIFEST }), 201);
    await ok(call(operator.token, 'POST', step(model, version, 'provenance'), PROVENANCE));
    await ok(call(operator.token, 'POST', step(model, version, 'verify')));
    await ok(call(operator.token, 'POST', step(model, version, 'evaluations'), PASSED));
    return await ok(call<VersionView>(admin.token, 'POST', step(model, version, 'approval'), { decision: 'approve', reason: 'passed smoke' }));
  };

  const auditOf = async (target: string) => (await ok(call<AuditPage>(admin.token, 'GET', `/audit?target=${encodeURIComponent(target)}`))).data.reverse();

  beforeAll(async () => {
    plane = await startTestPlane({ store: kind });
    admin = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'registry admin', role: 'admin' } });
    operator = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'registry operator', role: 'operator' } });
    const created = await ok(call<{ adminToken: { token: string } }>(admin.token, 'POST', '/workspaces', { name: 'registry-other' }), 201);
    other = created.adminToken.token;
    await ok(call(operator.token, 'POST', '/models', { name: 'tiny-llama', description: 'a three-file folder' }), 201);
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  it('takes a version from candidate to approved, refusing skipped steps with the reason, each step audited', async () => {
    await place('tiny-llama', 'v1', FOLDER);
    const candidate = await ok(
      call<VersionView>(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v1', format: 'safetensors', manifest: MANIFEST }),
      201,
    );
    expect(candidate).toMatchObject({ state: 'candidate', fileCount: 3, totalBytes: TOTAL, licence: null, verification: null });

    const early = await call(operator.token, 'POST', step('tiny-llama', 'v1', 'verify'));
    expect(early.status).toBe(409);
    expect(early.body.error).toMatchObject({
      code: 'invalid_transition',
      message: "a version's licence and provenance must be recorded before its digests are verified (it is candidate)",
    });

    expect((await ok(call<VersionView>(operator.token, 'POST', step('tiny-llama', 'v1', 'provenance'), PROVENANCE))).state).toBe('documented');
    const verified = await ok(call<VersionView>(operator.token, 'POST', step('tiny-llama', 'v1', 'verify')));
    expect(verified.state).toBe('verified');
    expect(verified.verification).toMatchObject({ passed: true, files: 3, bytes: TOTAL, problems: [], problemCount: 0, by: operator.id });

    const skipped = await call(admin.token, 'POST', step('tiny-llama', 'v1', 'approval'), { decision: 'approve', reason: 'looks fine' });
    expect(skipped.status).toBe(409);
    expect(skipped.body.error?.message).toBe('a version must be evaluated before it is approved (it is verified)');

    expect((await ok(call<VersionView>(operator.token, 'POST', step('tiny-llama', 'v1', 'evaluations'), PASSED))).state).toBe('evaluated');
    // An operator may record evidence, not decide.
    const byOperator = await call(operator.token, 'POST', step('tiny-llama', 'v1', 'approval'), { decision: 'approve', reason: 'me' });
    expect({ status: byOperator.status, code: byOperator.body.error?.code }).toEqual({ status: 403, code: 'forbidden' });
    const approved = await ok(
      call<VersionView>(admin.token, 'POST', step('tiny-llama', 'v1', 'approval'), { decision: 'approve', reason: 'smoke suite passed' }),
    );
    expect(approved.state).toBe('approved');
    expect(approved.evaluations).toMatchObject([{ suite: 'smoke', passed: true, metrics: { accuracy: 0.91, p95_ms: 840 }, recordedBy: operator.id }]);

    const trail = (await auditOf(approved.id)).map((e) => [e.action, e.actor, e.details.to]);
    expect(trail).toEqual([
      ['model_version.register', operator.id, undefined],
      ['model_version.document', operator.id, 'documented'],
      ['model_version.verify', operator.id, 'verified'],
      ['model_version.evaluate', operator.id, 'evaluated'],
      ['model_version.approve', admin.id, 'approved'],
    ]);
    expect((await auditOf(approved.id)).at(-1)?.details.reason).toBe('smoke suite passed');
    const detail = await ok(call<ModelDetail>(operator.token, 'GET', '/models/tiny-llama'));
    expect(detail.versions.map((v) => [v.version, v.state])).toEqual([['v1', 'approved']]);
  });

  it('rejects a version whose files were tampered with, cut, grown or removed, reporting each file', async () => {
    const tampered = Buffer.from(FOLDER['model.safetensors']!);
    tampered.writeUInt8(tampered.readUInt8(1234) ^ 0x01, 1234);
    await place('tiny-llama', 'v2', {
      'model.safetensors': tampered,
      'tokenizer/tokenizer.json': Buffer.concat([FOLDER['tokenizer/tokenizer.json']!, Buffer.from(' ')]),
    });
    await ok(call(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v2', format: 'safetensors', manifest: MANIFEST }), 201);
    await ok(call(operator.token, 'POST', step('tiny-llama', 'v2', 'provenance'), PROVENANCE));
    const rejected = await ok(call<VersionView>(operator.token, 'POST', step('tiny-llama', 'v2', 'verify')));
    expect(rejected.state).toBe('rejected');
    expect(rejected.verification?.passed).toBe(false);
    expect(rejected.verification?.problems.map((p) => [p.path, p.problem, p.actualSize])).toEqual([
      ['config.json', 'missing', null],
      ['model.safetensors', 'digest_mismatch', FOLDER['model.safetensors']!.length],
      ['tokenizer/tokenizer.json', 'size_mismatch', FOLDER['tokenizer/tokenizer.json']!.length + 1],
    ]);
    // A rejected version stays rejected: nothing moves it on.
    const again = await call(operator.token, 'POST', step('tiny-llama', 'v2', 'evaluations'), PASSED);
    expect({ status: again.status, message: again.body.error?.message }).toEqual({ status: 409, message: 'the version was rejected; register a new version' });
  });

  it('refuses a file that is a link out of the version folder, and a folder where a file should be', async () => {
    const root = await place('tiny-llama', 'v-link', { 'config.json': FOLDER['config.json']! });
    const outside = join(plane.dataDir, 'outside.safetensors');
    await writeFile(outside, FOLDER['model.safetensors']!);
    await symlink(outside, join(root, 'model.safetensors'));
    await mkdir(join(root, 'tokenizer/tokenizer.json'), { recursive: true });
    await ok(call(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v-link', format: 'safetensors', manifest: MANIFEST }), 201);
    await ok(call(operator.token, 'POST', step('tiny-llama', 'v-link', 'provenance'), PROVENANCE));
    const rejected = await ok(call<VersionView>(operator.token, 'POST', step('tiny-llama', 'v-link', 'verify')));
    expect(rejected.state).toBe('rejected');
    expect(rejected.verification?.problems).toMatchObject([
      { path: 'model.safetensors', problem: 'outside_folder', actualSize: null },
      { path: 'tokenizer/tokenizer.json', problem: 'not_a_file', actualSize: null },
    ]);
  });

  it('answers 409 no_artifact_store where there is no local store (Workers), changing nothing', async () => {
    await ok(call(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v-nostore', format: 'other', manifest: MANIFEST }), 201);
    await ok(call(operator.token, 'POST', step('tiny-llama', 'v-nostore', 'provenance'), PROVENANCE));
    // The service as the Workers entry calls it: its ports carry no artifact store.
    const input = { workspaceId: plane.workspaceId, model: 'tiny-llama', version: 'v-nostore' };
    await expect(verifyVersion({ ctx: { ...plane.systemCtx, actor: operator.id }, input })).rejects.toMatchObject({ code: 'no_artifact_store', status: 409 });
    expect((await ok(call<VersionView>(operator.token, 'GET', '/models/tiny-llama/versions/v-nostore'))).state).toBe('documented');
  });

  it('answers a manifest path that leaves the folder with 400, creating nothing', async () => {
    for (const path of ['../escape.bin', '/etc/passwd', 'weights\\model.bin', 'a//b']) {
      const manifest = { files: [...MANIFEST.files, { path, size: 1, sha256: 'a'.repeat(64) }] };
      const answer = await call(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v-bad', format: 'other', manifest });
      expect({ status: answer.status, code: answer.body.error?.code }, path).toEqual({ status: 400, code: 'validation_failed' });
      expect(answer.body.error?.message, path).toMatch(/at manifest\.files\.3\.path$/);
    }
    const duplicate = await call(operator.token, 'POST', '/models/tiny-llama/versions', {
      version: 'v-bad',
      format: 'other',
      manifest: { files: [...MANIFEST.files, MANIFEST.files[0]] },
    });
    expect(duplicate.status).toBe(400);
    expect((await call(operator.token, 'GET', '/models/tiny-llama/versions/v-bad')).status).toBe(404);
  });

  it('takes a manifest of 10,000 files (past the 64 KiB of other bodies), and not one more', async () => {
    const shards = (n: number) => ({
      files: Array.from({ length: n }, (_, i) => ({ path: `shards/shard-${String(i).padStart(5, '0')}.bin`, size: i, sha256: 'b'.repeat(64) })),
    });
    const many = await ok(
      call<VersionView>(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v-many', format: 'other', manifest: shards(10_000) }),
      201,
    );
    expect(many).toMatchObject({ fileCount: 10_000, totalBytes: (9_999 * 10_000) / 2 });
    const more = await call(operator.token, 'POST', '/models/tiny-llama/versions', { version: 'v-more', format: 'other', manifest: shards(10_001) });
    expect({ status: more.status, code: more.body.error?.code }).toEqual({ status: 400, code: 'validation_failed' });
  });

  it('points an alias only at an approved version, audits every move with who and why, and rolls back one step', async () => {
    const unapproved = await call(admin.token, 'PUT', '/aliases/chat-default', { model: 'tiny-llama', version: 'v2', reason: 'try it' });
    expect({ status: unapproved.status, code: unapproved.body.error?.code }).toEqual({ status: 409, code: 'invalid_transition' });
    expect(unapproved.body.error?.message).toContain('which is rejected');
    const byOperator = await call(operator.token, 'PUT', '/aliases/chat-default', { model: 'tiny-llama', version: 'v1', reason: 'me' });
    expect(byOperator.status).toBe(403);

    const first = await ok(call<AliasView>(admin.token, 'PUT', '/aliases/chat-default', { model: 'tiny-llama', version: 'v1', reason: 'first release' }));
    expect(first).toMatchObject({ name: 'chat-default', model: 'tiny-llama', version: 'v1', updatedBy: admin.id });
    const v3 = await approvedVersion('tiny-llama', 'v3');
    const second = await ok(call<AliasView>(admin.token, 'PUT', '/aliases/chat-default', { model: 'tiny-llama', version: 'v3', reason: 'v3 scores higher' }));
    expect(second.versionId).toBe(v3.id);

    const back = await ok(call<AliasView>(admin.token, 'POST', '/aliases/chat-default/rollback', { reason: 'v3 answers slowly' }));
    expect(back).toMatchObject({ version: 'v1', versionId: first.versionId });
    const none = await call(admin.token, 'POST', '/aliases/chat-default/rollback', { reason: 'further' });
    expect({ status: none.status, message: none.body.error?.message }).toEqual({
      status: 409,
      message: 'alias chat-default has no earlier version to roll back to',
    });

    const moves = (await auditOf('chat-default')).map((e) => [e.action, e.actor, e.details.from, e.details.to, e.details.reason]);
    expect(moves).toEqual([
      ['model_alias.set', admin.id, null, first.versionId, 'first release'],
      ['model_alias.set', admin.id, first.versionId, v3.id, 'v3 scores higher'],
      ['model_alias.rollback', admin.id, v3.id, first.versionId, 'v3 answers slowly'],
    ]);
    const aliases = await ok(call<{ data: AliasView[] }>(operator.token, 'GET', '/aliases'));
    expect(aliases.data.map((a) => [a.name, a.version])).toEqual([['chat-default', 'v1']]);
  });

  it('pages models by name, and refuses a cursor it did not mint', async () => {
    for (const name of ['a-model', 'z-model']) await ok(call(operator.token, 'POST', '/models', { name }), 201);
    const taken = await call(operator.token, 'POST', '/models', { name: 'a-model' });
    expect({ status: taken.status, code: taken.body.error?.code }).toEqual({ status: 409, code: 'conflict' });
    const first = await ok(call<{ data: Array<{ name: string }>; nextCursor: string | null }>(admin.token, 'GET', '/models?limit=2'));
    const second = await ok(
      call<{ data: Array<{ name: string }>; nextCursor: string | null }>(admin.token, 'GET', `/models?limit=2&cursor=${first.nextCursor}`),
    );
    expect([first.data.map((m) => m.name), second.data.map((m) => m.name), second.nextCursor]).toEqual([['a-model', 'tiny-llama'], ['z-model'], null]);
    expect((await call(admin.token, 'GET', '/aliases?cursor=bm90LW91cnM')).body.error?.code).toBe('invalid_cursor');
  });

  it("shows another workspace none of this workspace's models, versions or aliases, and lets it act on none", async () => {
    for (const [method, path, body] of [
      ['GET', '/models/tiny-llama', undefined],
      ['GET', '/models/tiny-llama/versions/v1', undefined],
      ['POST', step('tiny-llama', 'v1', 'evaluations'), PASSED],
      ['POST', '/aliases/chat-default/rollback', { reason: 'not mine' }],
      ['PUT', '/aliases/chat-default', { model: 'tiny-llama', version: 'v1', reason: 'not mine' }],
    ] as const) {
      const answer = await call(other, method, path, body);
      expect({ status: answer.status, code: answer.body.error?.code }, `${method} ${path}`).toEqual({ status: 404, code: 'not_found' });
    }
    expect((await ok(call<{ data: unknown[] }>(other, 'GET', '/models'))).data).toEqual([]);
    expect((await ok(call<{ data: unknown[] }>(other, 'GET', '/aliases'))).data).toEqual([]);
    // The same name is free in another workspace.
    await ok(call(other, 'POST', '/models', { name: 'tiny-llama' }), 201);
  });

  it('serves versions through deployments: sources and canaries checked, canaries started, ended by a rollback; policy enforced', async () => {
    expect(await ok(call(admin.token, 'GET', '/workspaces/current/policy'))).toEqual({ quota: {}, dataClasses: {}, licences: {} });
    const policy = {
      quota: { gpus: 8 },
      dataClasses: { internal: { machineSelector: {}, runtimes: ['simulated'] }, pii: { machineSelector: { zone: 'secure' }, runtimes: ['vllm'] } },
    };
    expect((await call(operator.token, 'PUT', '/workspaces/current/policy', policy)).status).toBe(403);
    expect(await ok(call(admin.token, 'PUT', '/workspaces/current/policy', policy))).toMatchObject({
      quota: { gpus: 8 },
      dataClasses: { pii: { retention: 'none' } },
    });

    await ok(call(operator.token, 'POST', '/models', { name: 'serve-model' }), 201);
    await approvedVersion('serve-model', 'v1');
    await approvedVersion('serve-model', 'v2');
    await ok(call(admin.token, 'PUT', '/aliases/serve-default', { model: 'serve-model', version: 'v1', reason: 'first' }));
    await place('serve-model', 'v0', FOLDER);
    await ok(call(operator.token, 'POST', '/models/serve-model/versions', { version: 'v0', format: 'safetensors', manifest: MANIFEST }), 201);

    const runtime = { kind: 'simulated', model: 'serve', ttftMs: 5, tokensPerSecond: 0, loadMs: 10, memoryMiB: 64, failureRate: 0 };
    const deploy = (extra: Record<string, unknown>) =>
      call<{ generation: number; canary: unknown; error?: unknown }>(operator.token, 'PUT', '/deployments/serve', {
        model: 'serve',
        runtime,
        replicas: 0,
        ...extra,
      });
    const refused = async (extra: Record<string, unknown>, status: number, code: string, message: RegExp) => {
      const answer = await deploy(extra);
      expect(answer.status, JSON.stringify(answer.body)).toBe(status);
      expect(answer.body.error).toMatchObject({ code, message: expect.stringMatching(message) });
    };
    await refused({ source: { kind: 'alias', alias: 'nowhere' } }, 400, 'validation_failed', /alias nowhere not found/);
    await refused({ source: { kind: 'version', model: 'serve-model', version: 'v9' } }, 400, 'validation_failed', /version v9 of model serve-model not found/);
    await refused(
      { source: { kind: 'version', model: 'serve-model', version: 'v0' } },
      409,
      'invalid_transition',
      /serves only an approved version: serve-model v0 is candidate/,
    );
    await refused(
      { source: { kind: 'alias', alias: 'serve-default' }, artifact: { uri: 'file:///x', sha256: '0'.repeat(64) } },
      400,
      'validation_failed',
      /not both/,
    );
    await refused({ canary: { version: 'v2', weight: 10 } }, 400, 'validation_failed', /name a source first/);
    await refused({ dataClass: 'secret' }, 400, 'validation_failed', /data class secret is not in the workspace's policy/);
    await refused({ dataClass: 'pii' }, 400, 'validation_failed', /data class pii may not run on runtime simulated/);
    await refused(
      { source: { kind: 'alias', alias: 'serve-default' }, canary: { version: 'v1', weight: 10 } },
      400,
      'validation_failed',
      /already what the deployment serves/,
    );
    expect((await call(admin.token, 'GET', '/deployments/serve')).status).toBe(404);

    const applied = await ok(deploy({ source: { kind: 'alias', alias: 'serve-default' }, canary: { version: 'v2', weight: 20 }, dataClass: 'internal' }));
    expect(applied.canary).toEqual({ version: 'v2', weight: 20, replicas: 1, selector: {} });
    expect((await ok(call<VersionView>(admin.token, 'GET', '/models/serve-model/versions/v2'))).state).toBe('canary');
    const v2 = await ok(call<VersionView>(admin.token, 'GET', '/models/serve-model/versions/v2'));
    expect((await auditOf(v2.id)).at(-1)).toMatchObject({
      action: 'model_version.start_canary',
      actor: operator.id,
      details: { from: 'approved', to: 'canary', deployment: 'serve' },
    });

    // No machine runs the canary: the gate's readiness half refuses, and records nothing.
    const gate = await call(operator.token, 'POST', '/deployments/serve/canary/gate', { name: 'smoke', requests: 2 });
    expect(gate.status).toBe(409);
    expect(gate.body.error?.message).toMatch(/the canary is not ready: 0 of 1 replicas of serve-model v2 serve/);
    expect(await ok(call(operator.token, 'GET', '/models/serve-model/versions/v2/benchmarks'))).toEqual({ items: [] });
    const early = await call(admin.token, 'POST', '/models/serve-model/versions/v2/promotion', { alias: 'serve-default', reason: 'too soon' });
    expect(early.status).toBe(409);
    expect(early.body.error?.message).toMatch(/must pass its canary's readiness and benchmark gate before it is promoted/);

    // A rollback of the canary's version ends the canary; the alias never pointed at it, so it stays.
    expect((await call(operator.token, 'POST', '/models/serve-model/versions/v2/rollback', { reason: 'bad canary' })).status).toBe(403);
    const rolled = await ok(
      call<{ version: VersionView; aliases: string[]; endedCanaries: string[] }>(admin.token, 'POST', '/models/serve-model/versions/v2/rollback', {
        reason: 'bad canary',
      }),
    );
    expect(rolled).toMatchObject({ version: { state: 'rolled_back' }, aliases: [], endedCanaries: ['serve'] });
    const after = await ok(call<{ canary: unknown; generation: number }>(admin.token, 'GET', '/deployments/serve'));
    expect(after).toMatchObject({ canary: null, generation: applied.generation + 1 });
    await refused(
      { source: { kind: 'alias', alias: 'serve-default' }, canary: { version: 'v2', weight: 20 } },
      409,
      'invalid_transition',
      /serve-model v2 is rolled_back/,
    );
    // A pinned source is checked the same way; an approved version is no canary yet, so it cannot be rolled back.
    await ok(
      call(admin.token, 'PUT', '/deployments/serve', {
        model: 'serve',
        runtime,
        replicas: 0,
        source: { kind: 'version', model: 'serve-model', version: 'v1' },
      }),
    );
    const stuck = await call(admin.token, 'POST', '/models/serve-model/versions/v1/rollback', { reason: 'no' });
    expect(stuck.status).toBe(409);
    expect(stuck.body.error?.message).toMatch(/only a version in canary or further on can be rolled back/);
  });
}

describe('the model registry on PGlite', () => registrySuite('pglite'));
describePg('the model registry on PostgreSQL', () => registrySuite('pg'));
