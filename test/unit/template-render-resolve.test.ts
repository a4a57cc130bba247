import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalize } from '../../shared/canonical.js';
import { RuntimeTemplateSpec } from '../../shared/contracts/runtime-template.js';
import { DeploymentRuntime } from '../../shared/contracts/deployment.js';
import { checkTemplate } from '../../functions/core/registry/template-check.js';
import { registryOf, replicaHash, resolveRuntime } from '../../functions/core/registry/resolve.js';
import { newSecretKey, parseSecretKey, secretBox } from '../../functions/core/registry/secret-box.js';
import { templateHash } from '../../functions/core/registry/template.js';

const SHA = 'b'.repeat(64);
const spec = (over: Record<string, unknown> = {}) =>
  RuntimeTemplateSpec.parse({
    executable: '/opt/llama.cpp/bin/llama-server',
    executableSha256: SHA,
    args: ['-m', '{model_path}', '--port', '{port}', '--ctx-size', '{ctx}'],
    params: { ctx: { type: 'integer', min: 512, max: 32768, default: 4096 } },
    env: ['HF_TOKEN'],
    ...over,
  });

describe('checking a template an admin registers', () => {
  it('accepts a consistent template', () => {
    expect(checkTemplate(spec())).toEqual([]);
  });

  it('every placeholder is a declared param or an agent placeholder', () => {
    expect(checkTemplate(spec({ args: ['--port', '{port}', '--x', '{command}', '{ctx}'] }))).toEqual([
      {
        path: 'args.3',
        message: 'unknown placeholder {command}: declare it in params, or use an agent placeholder (port, model_path, served_name, gpu_indices, instance)',
      },
    ]);
    expect(checkTemplate(spec({ args: ['{served_name}', '{gpu_indices}', '{instance}', '{model_path}', '{port}', '{ctx}'] }))).toEqual([]);
  });

  it('a param cannot take the name of an agent placeholder, and must be used', () => {
    expect(checkTemplate(spec({ params: { port: { type: 'integer' }, ctx: { type: 'integer' } } }))).toEqual([
      { path: 'params.port', message: 'param port has the name of an agent placeholder, which only the agent fills' },
    ]);
    expect(checkTemplate(spec({ params: { ctx: { type: 'integer' }, unused: { type: 'boolean' } } }))).toEqual([
      { path: 'params.unused', message: 'param unused is declared but no argument uses it' },
    ]);
  });

  it('string patterns compile and are anchored', () => {
    const withPattern = (pattern: string) => spec({ args: ['{ctx}', '{v}'], params: { ctx: { type: 'integer' }, v: { type: 'string', pattern } } });
    expect(checkTemplate(withPattern('^[a-z]+$'))).toEqual([]);
    expect(checkTemplate(withPattern('[a-z]+'))).toEqual([{ path: 'params.v.pattern', message: 'pattern must be anchored: start with ^ and end with $' }]);
    expect(checkTemplate(withPattern('^[a-z]+'))).toHaveLength(1);
    expect(checkTemplate(withPattern('[a-z]+$'))).toHaveLength(1);
    expect(checkTemplate(withPattern('^[a-z]+\\$'))).toEqual([{ path: 'params.v.pattern', message: 'pattern must be anchored: start with ^ and end with $' }]);
    expect(checkTemplate(withPattern('^[a-z]+\\\\$'))).toEqual([]);
    expect(checkTemplate(withPattern('^([a-z]+$'))[0]).toMatchObject({ path: 'params.v.pattern', message: expect.stringMatching(/^pattern does not compile/) });
  });

  it('defaults satisfy their own type', () => {
    const param = (p: Record<string, unknown>) => checkTemplate(spec({ args: ['{v}'], params: { v: p } }));
    expect(param({ type: 'integer', min: 1, max: 8, default: 9 })).toEqual([
      { path: 'params.v.default', message: 'the default of v must be between 1 and 8, not 9' },
    ]);
    expect(param({ type: 'number', min: 0, max: 1, default: 1.5 })).toHaveLength(1);
    expect(param({ type: 'string', pattern: '^[a-z]+$', default: 'ABC' })).toEqual([
      { path: 'params.v.default', message: 'the default of v must match ^[a-z]+$' },
    ]);
    expect(param({ type: 'string', pattern: '^.*$', default: '--trust-remote-code' })).toHaveLength(1);
    expect(param({ type: 'integer', min: 8, max: 1 })).toEqual([{ path: 'params.v', message: 'param v: min 8 is above max 1' }]);
    expect(param({ type: 'integer', min: 1, max: 8, default: 8 })).toEqual([]);
  });

  it('a flag param must be an argument on its own', () => {
    const flag = { type: 'boolean', flag: '--enforce-eager' };
    expect(checkTemplate(spec({ args: ['{ctx}', '{eager}'], params: { ctx: { type: 'integer' }, eager: flag } }))).toEqual([]);
    expect(checkTemplate(spec({ args: ['{ctx}', '--x={eager}'], params: { ctx: { type: 'integer' }, eager: flag } }))).toEqual([
      { path: 'args.1', message: 'the flag param {eager} must be a whole argument on its own' },
    ]);
  });

  it('refuses environment names that load other code, and duplicates', () => {
    for (const name of ['LD_PRELOAD', 'LD_LIBRARY_PATH', 'DYLD_INSERT_LIBRARIES', 'PYTHONPATH', 'NODE_OPTIONS', 'BASH_ENV']) {
      expect(checkTemplate(spec({ env: [name] }))).toEqual([
        { path: 'env.0', message: `environment variable ${name} cannot be allowed: it makes the loader, an interpreter or a shell run other code` },
      ]);
    }
    // The agent's own: a deployment cannot pick its GPUs, its port or the runtime's search path.
    for (const name of ['PATH', 'HOME', 'PORT', 'CUDA_VISIBLE_DEVICES', 'LUNANEXA_RUNTIME_INSTANCE', 'LUNANEXA_ANYTHING']) {
      expect(checkTemplate(spec({ env: [name] }))).toEqual([
        { path: 'env.0', message: `environment variable ${name} cannot be allowed: the agent sets it for every runtime itself` },
      ]);
    }
    expect(checkTemplate(spec({ env: ['HF_TOKEN', 'HF_TOKEN'] }))).toEqual([{ path: 'env.1', message: 'environment variable HF_TOKEN is listed twice' }]);
    expect(checkTemplate(spec({ env: ['HF_HOME', 'HF_HUB_OFFLINE', 'VLLM_LOGGING_LEVEL', 'NCCL_DEBUG'] }))).toEqual([]);
  });

  it('the executable is a normalised absolute path', () => {
    expect(RuntimeTemplateSpec.safeParse({ ...spec(), executable: 'vllm' }).success).toBe(false);
    for (const executable of ['/opt/../bin/sh', '/opt/./x', '//x', '/opt/x/', '/opt/..']) {
      expect(checkTemplate(spec({ executable }))[0]).toMatchObject({ path: 'executable' });
    }
  });

  it('args and the whole spec hold no control characters', () => {
    expect(checkTemplate(spec({ args: ['{ctx}', 'a\nb'] }))).toEqual([{ path: 'args.1', message: 'argument 1 contains a control character' }]);
  });
});

describe('resolving a deployment runtime', () => {
  const WS = 'ws_1';
  const registry = registryOf({
    templates: [{ workspaceId: WS, name: 'llama', spec: spec() }],
    secrets: [{ workspaceId: WS, name: 'hf', version: 'v1', feeds: [{ template: 'llama', env: 'HF_TOKEN' }] }],
  });
  const runtime = (over: Record<string, unknown> = {}) => DeploymentRuntime.parse({ kind: 'template', template: 'llama', ...over });

  it('resolves to the pinned executable, rendered args, plain env and secret references', () => {
    const resolved = resolveRuntime({ workspaceId: WS, registry, runtime: runtime({ params: { ctx: 8192 }, env: { HF_TOKEN: { secret: 'hf' } } }) });
    expect(resolved).toEqual({
      ok: true,
      value: {
        runtime: {
          kind: 'template',
          template: 'llama',
          executable: '/opt/llama.cpp/bin/llama-server',
          executableSha256: SHA,
          args: ['-m', '{model_path}', '--port', '{port}', '--ctx-size', '8192'],
          env: {},
          healthPath: '/health',
        },
        secretEnv: { HF_TOKEN: { secret: 'hf', version: 'v1' } },
      },
    });
  });

  it("carries a template's metricsPath to the replica, and leaves a template without one hashing as before", () => {
    const withMetrics = registryOf({ templates: [{ workspaceId: WS, name: 'llama', spec: { ...spec(), metricsPath: '/metrics' } }], secrets: [] });
    const declared = resolveRuntime({ workspaceId: WS, registry: withMetrics, runtime: runtime({ params: { ctx: 8192 } }) });
    expect(declared).toMatchObject({ ok: true, value: { runtime: { metricsPath: '/metrics' } } });
    const plain = resolveRuntime({ workspaceId: WS, registry, runtime: runtime({ params: { ctx: 8192 } }) });
    // No `metricsPath` key at all: the replica's digest (templateHash) is the one it had before telemetry.
    expect(plain.ok && Object.keys(plain.value.runtime)).not.toContain('metricsPath');
    expect(RuntimeTemplateSpec.safeParse({ ...spec(), metricsPath: 'metrics' }).success).toBe(false);
    expect(RuntimeTemplateSpec.safeParse({ ...spec(), metricsPath: '/metrics?x=1' }).success).toBe(false);
  });

  it('templates and secrets are per workspace', () => {
    expect(resolveRuntime({ workspaceId: 'ws_2', registry, runtime: runtime() })).toMatchObject({ ok: false, code: 'unknown_template' });
  });

  it('names the unknown template, the unknown secret, the invalid param', () => {
    expect(resolveRuntime({ workspaceId: WS, registry, runtime: runtime({ template: 'vllm' }) })).toEqual({
      ok: false,
      code: 'unknown_template',
      issues: [{ path: 'runtime.template', message: 'runtime template vllm is not registered' }],
    });
    expect(resolveRuntime({ workspaceId: WS, registry, runtime: runtime({ env: { HF_TOKEN: { secret: 'nope' } } }) })).toEqual({
      ok: false,
      code: 'unknown_secret',
      issues: [{ path: 'runtime.env.HF_TOKEN', message: 'runtime secret nope does not exist' }],
    });
    expect(resolveRuntime({ workspaceId: WS, registry, runtime: runtime({ params: { ctx: 1 } }) })).toMatchObject({
      ok: false,
      code: 'validation_failed',
      issues: [{ path: 'runtime.params.ctx' }],
    });
  });

  it('a secret feeds only the template and variables its admin listed (security review 2, M1)', () => {
    const unlisted = registryOf({
      templates: [{ workspaceId: WS, name: 'llama', spec: spec() }],
      secrets: [{ workspaceId: WS, name: 'hf', version: 'v1', feeds: [] }],
    });
    expect(resolveRuntime({ workspaceId: WS, registry: unlisted, runtime: runtime({ env: { HF_TOKEN: { secret: 'hf' } } }) })).toEqual({
      ok: false,
      code: 'validation_failed',
      issues: [{ path: 'runtime.env.HF_TOKEN', message: expect.stringMatching(/^runtime secret hf may not feed HF_TOKEN of template llama: an admin lists/) }],
    });
  });

  it('the simulated runtime resolves to itself, and the removed process kind never resolves', () => {
    const sim = DeploymentRuntime.parse({ kind: 'simulated', model: 'm' });
    expect(resolveRuntime({ workspaceId: WS, registry, runtime: sim })).toEqual({ ok: true, value: { runtime: sim, secretEnv: {} } });
    expect(DeploymentRuntime.safeParse({ kind: 'process', command: ['/bin/sh'] }).success).toBe(false);
    const legacy = { kind: 'process', command: ['/bin/sh', '-c', 'cat machine-key.jwk'] } as unknown as DeploymentRuntime;
    expect(resolveRuntime({ workspaceId: WS, registry, runtime: legacy })).toMatchObject({
      ok: false,
      code: 'validation_failed',
      issues: [{ path: 'runtime.kind' }],
    });
  });

  it('a stored runtime of an unknown kind is refused by name, even with a template named like its missing field', () => {
    // Why the kind check stays although migration 0003 retired the process deployments: the stored runtime is
    // never parsed on read, and without the check it would be looked up as template `undefined`.
    const named = registryOf({ templates: [{ workspaceId: WS, name: 'undefined', spec: spec({ args: ['--port', '{port}'], params: {} }) }], secrets: [] });
    const legacy = { kind: 'process', command: ['/bin/sh', '-c', 'id'] } as unknown as DeploymentRuntime;
    expect(resolveRuntime({ workspaceId: WS, registry: named, runtime: legacy })).toMatchObject({
      ok: false,
      code: 'validation_failed',
      issues: [{ path: 'runtime.kind' }],
    });
  });

  it('the contract refuses env values that are neither a plain value nor a secret reference', () => {
    expect(DeploymentRuntime.safeParse({ kind: 'template', template: 'llama', env: { HF_TOKEN: 'x' } }).success).toBe(false);
    expect(DeploymentRuntime.safeParse({ kind: 'template', template: 'llama', env: { HF_TOKEN: { value: 'x', secret: 'hf' } } }).success).toBe(false);
    expect(DeploymentRuntime.safeParse({ kind: 'template', template: 'llama', env: { lower: { value: 'x' } } }).success).toBe(false);
  });
});

describe('the rollout digest', () => {
  const fields = {
    model: 'm',
    runtime: { kind: 'simulated' as const, model: 'm', ttftMs: 0, tokensPerSecond: 0, loadMs: 0, memoryMiB: 0, failureRate: 0 },
    artifact: null,
    resources: { gpus: 0, memoryMiB: 0 },
  };

  it('is the template digest without secrets, and changes with a secret version, never with anything else', () => {
    expect(replicaHash(fields, {})).toBe(templateHash(fields));
    const v1 = replicaHash(fields, { HF_TOKEN: { secret: 'hf', version: 'v1' } });
    expect(v1).not.toBe(templateHash(fields));
    expect(replicaHash(fields, { HF_TOKEN: { secret: 'hf', version: 'v1' } })).toBe(v1);
    expect(replicaHash(fields, { HF_TOKEN: { secret: 'hf', version: 'v2' } })).not.toBe(v1);
  });
});

describe('the template digest of a replica without a registry version', () => {
  it('is what it was before versions existed: stored assignments and running agents hold it', () => {
    const fields = {
      model: 'm',
      runtime: { kind: 'simulated' as const, model: 'm', ttftMs: 20, tokensPerSecond: 200, loadMs: 200, memoryMiB: 1024, failureRate: 0 },
      artifact: null,
      resources: { gpus: 1, memoryMiB: 2048 },
    };
    // The formula of the assignments written before versions: no versionId member at all (not even null).
    const before = createHash('sha256').update(canonicalize(fields)).digest('hex');
    expect(templateHash(fields)).toBe(before);
    expect(before).toBe('b6d371523fe06cefaf54d611468f0826f25de4d90e031e67b0cefcb46f914fd0');
    // A versionId member, even null, would change every such digest, and so restart every such replica.
    expect(
      createHash('sha256')
        .update(canonicalize({ ...fields, versionId: null }))
        .digest('hex'),
    ).not.toBe(before);
  });
});

describe('sealing runtime secrets', () => {
  const key = newSecretKey();

  it('round-trips under the same key and associated data only', () => {
    const box = secretBox(key);
    const sealed = box.seal('hf_secret_value', 'ws/a');
    expect(sealed).not.toContain('hf_secret_value');
    expect(sealed).toMatch(/^v1\.[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(box.open(sealed, 'ws/a')).toBe('hf_secret_value');
    expect(box.open(sealed, 'ws/b')).toBeNull();
    expect(secretBox(newSecretKey()).open(sealed, 'ws/a')).toBeNull();
    expect(
      box.open(
        sealed.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')),
        'ws/a',
      ),
    ).toBeNull();
    expect(box.open('garbage', 'ws/a')).toBeNull();
  });

  it('a fresh IV each time, and a key id that names the key without revealing it', () => {
    const box = secretBox(key);
    expect(box.seal('x', 'a')).not.toBe(box.seal('x', 'a'));
    expect(box.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(secretBox(key).keyId).toBe(box.keyId);
    expect(secretBox(newSecretKey()).keyId).not.toBe(box.keyId);
  });

  it('keys are 32 bytes of base64', () => {
    expect(parseSecretKey(key)).toHaveLength(32);
    expect(() => parseSecretKey(Buffer.alloc(16).toString('base64'))).toThrow(/32 bytes/);
    expect(() => parseSecretKey('not base64 at all!')).toThrow(/32 bytes/);
  });
});
