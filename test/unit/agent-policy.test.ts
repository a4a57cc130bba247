import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_SET_ENV, AgentPolicy, DENY_ALL, allowsNothing, insideRoots, policyRefusal } from '../../agent/policy.js';
import { loadPolicy } from '../../agent/policy-file.js';
import { LaunchRefused } from '../../agent/runtimes/adapter.js';
import { allocateGpus, fillPlaceholders, runtimeEnv, SAFE_PATH, type PlaceholderValues } from '../../agent/runtimes/launch.js';
import { parseGroupLine, parsePasswdLine } from '../../agent/runtime-user.js';
import type { Assignment, TemplateRuntime } from '../../shared/contracts/desired.js';

const DIGEST = 'a'.repeat(64);
const OTHER_DIGEST = 'b'.repeat(64);

const vllm = (extra: Partial<TemplateRuntime> = {}): TemplateRuntime => ({
  kind: 'template',
  template: 'vllm',
  executable: '/opt/vllm/bin/vllm',
  executableSha256: DIGEST,
  args: ['serve', '{model_path}', '--port', '{port}'],
  env: {},
  healthPath: '/health',
  ...extra,
});

const assignment = (runtime: Assignment['runtime'], artifact: Assignment['artifact'] = null): Assignment => ({
  assignmentId: 'asg_1',
  deploymentId: 'dep_1',
  deploymentName: 'chat',
  model: 'chat',
  deploymentGeneration: 1,
  runtime,
  artifact,
  restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
  resources: { gpus: 1, memoryMiB: 1024 },
  startup: { timeoutMs: 60_000, probeIntervalMs: 500, failureThreshold: 3 },
  templateHash: 'h',
});

const simulated: Assignment['runtime'] = { kind: 'simulated', model: 'sim', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 };

const policy = (input: unknown) => AgentPolicy.parse(input);
const allowingVllm = (extra: Record<string, unknown> = {}) =>
  policy({ templates: { vllm: { executable: '/opt/vllm/bin/vllm', env: ['HF_HOME', 'VLLM_LOGGING_LEVEL'], ...extra } }, artifactRoots: ['/srv/models'] });

describe('the local policy file schema', () => {
  it('defaults to nothing: no template, no simulated runtime, no artifact root, no runtime user', () => {
    expect(DENY_ALL).toEqual({ templates: {}, simulated: false, artifactRoots: [], artifactLimits: { maxBytes: 256 * 1024 ** 3, maxSeconds: 3600 } });
    expect(allowsNothing(DENY_ALL)).toBe(true);
    expect(allowsNothing(policy({ simulated: true }))).toBe(false);
    expect(allowsNothing(allowingVllm())).toBe(false);
  });

  it('fills the artifact limits it is not given', () => {
    expect(policy({ artifactLimits: { maxBytes: 10 } }).artifactLimits).toEqual({ maxBytes: 10, maxSeconds: 3600 });
  });

  it('refuses unknown keys at every level, so that a misspelt setting never passes for a missing one', () => {
    for (const input of [
      { simluated: true },
      { templates: { vllm: { executable: '/x', sha: DIGEST } } },
      { runAs: { user: 'a', uid: 5 } },
      { artifactLimits: { maxbytes: 1 } },
    ]) {
      expect(AgentPolicy.safeParse(input).success, JSON.stringify(input)).toBe(false);
    }
  });

  it('takes only absolute, normalized paths, and never / as an artifact root', () => {
    for (const executable of ['vllm', './vllm', '/opt/../bin/sh', '/opt/vllm/', '/opt//vllm', '/opt/./vllm']) {
      expect(AgentPolicy.safeParse({ templates: { vllm: { executable } } }).success, executable).toBe(false);
    }
    for (const root of ['/', 'models', '/srv/../etc', '/srv/models/']) expect(AgentPolicy.safeParse({ artifactRoots: [root] }).success, root).toBe(false);
    expect(policy({ artifactRoots: ['/srv/models'] }).artifactRoots).toEqual(['/srv/models']);
  });

  it('refuses template names and environment names that are not plain, and the variables the agent sets itself', () => {
    for (const name of ['VLLM', 'a b', '../x', '']) expect(AgentPolicy.safeParse({ templates: { [name]: { executable: '/x' } } }).success, name).toBe(false);
    for (const env of ['lower', 'WITH-DASH', '1ST', ...AGENT_SET_ENV])
      expect(AgentPolicy.safeParse({ templates: { vllm: { executable: '/x', env: [env] } } }).success, env).toBe(false);
  });

  it('takes a digest pin only as 64 lowercase hex digits, and user and group names only as names', () => {
    expect(AgentPolicy.safeParse({ templates: { vllm: { executable: '/x', sha256: DIGEST.toUpperCase() } } }).success).toBe(false);
    expect(AgentPolicy.safeParse({ runAs: { user: 'root;rm' } }).success).toBe(false);
    expect(AgentPolicy.safeParse({ runAs: { user: 'lnx', group: '0' } }).success).toBe(false);
    expect(policy({ runAs: { user: 'lunanexa-runtime', group: 'video' } }).runAs).toEqual({ user: 'lunanexa-runtime', group: 'video' });
  });
});

describe('policyRefusal', () => {
  it('accepts the simulated runtime only when the policy allows it', () => {
    expect(policyRefusal(DENY_ALL, assignment(simulated))).toBe('the built-in simulated runtime is not allowed');
    expect(policyRefusal(allowingVllm(), assignment(simulated))).toBe('the built-in simulated runtime is not allowed');
    expect(policyRefusal(policy({ simulated: true }), assignment(simulated))).toBeNull();
  });

  it('accepts a template only by name', () => {
    expect(policyRefusal(DENY_ALL, assignment(vllm()))).toBe('template "vllm" is not allowed');
    expect(policyRefusal(policy({ simulated: true }), assignment(vllm()))).toBe('template "vllm" is not allowed');
    expect(policyRefusal(allowingVllm(), assignment(vllm({ template: 'llama-cpp' })))).toBe('template "llama-cpp" is not allowed');
    expect(policyRefusal(allowingVllm(), assignment(vllm()))).toBeNull();
  });

  it('never takes a template name for a property every object has', () => {
    for (const name of ['constructor', 'toString', 'hasOwnProperty', '__proto__', 'valueOf']) {
      expect(policyRefusal(allowingVllm(), assignment(vllm({ template: name })))).toBe(`template "${name}" is not allowed`);
    }
  });

  it('accepts a template only with the executable the policy names', () => {
    expect(policyRefusal(allowingVllm(), assignment(vllm({ executable: '/bin/sh' })))).toBe('template "vllm" must run /opt/vllm/bin/vllm, not /bin/sh');
    expect(policyRefusal(allowingVllm(), assignment(vllm({ executable: '/opt/vllm/bin/../bin/vllm' })))).toMatch(/must run \/opt\/vllm\/bin\/vllm/);
  });

  it('accepts a template only with the digest the policy pins, when it pins one', () => {
    expect(policyRefusal(allowingVllm({ sha256: DIGEST }), assignment(vllm()))).toBeNull();
    expect(policyRefusal(allowingVllm({ sha256: OTHER_DIGEST }), assignment(vllm()))).toBe(
      `template "vllm" pins executable digest ${DIGEST}, not the ${OTHER_DIGEST} of the local policy`,
    );
    // Without a pin, any digest goes: the one on disk is checked at launch against the assignment's.
    expect(policyRefusal(allowingVllm(), assignment(vllm({ executableSha256: OTHER_DIGEST })))).toBeNull();
  });

  it('accepts only environment variables the policy allows for that template', () => {
    expect(policyRefusal(allowingVllm(), assignment(vllm({ env: { HF_HOME: '/srv/hf', VLLM_LOGGING_LEVEL: 'INFO' } })))).toBeNull();
    expect(policyRefusal(allowingVllm(), assignment(vllm({ env: { HF_HOME: '/srv/hf', LD_PRELOAD: '/tmp/x.so', DATABASE_URL: 'x' } })))).toBe(
      'template "vllm" may not set environment variable DATABASE_URL',
    );
    expect(policyRefusal(allowingVllm({ env: [] }), assignment(vllm({ env: { HF_HOME: '/srv/hf' } })))).toBe(
      'template "vllm" may not set environment variable HF_HOME',
    );
    // The agent's own variables are not the policy's to allow.
    expect(policyRefusal(allowingVllm(), assignment(vllm({ env: { PATH: '/tmp' } })))).toBe('template "vllm" may not set environment variable PATH');
  });

  it('accepts an artifact only as a file: URI, and only with an artifact root', () => {
    const file = { uri: 'file:///srv/models/m.gguf', sha256: DIGEST };
    expect(policyRefusal(allowingVllm(), assignment(vllm(), file))).toBeNull();
    expect(policyRefusal(allowingVllm(), assignment(vllm(), { uri: 'https://evil.example/m.gguf', sha256: DIGEST }))).toBe(
      'artifact https://evil.example/m.gguf: only file: URIs are supported',
    );
    expect(policyRefusal(policy({ templates: { vllm: { executable: '/opt/vllm/bin/vllm' } } }), assignment(vllm(), file))).toBe('no artifact root is allowed');
    expect(policyRefusal(policy({ simulated: true }), assignment(simulated, file))).toBe('no artifact root is allowed');
    expect(policyRefusal(policy({ simulated: true }), assignment(simulated))).toBeNull();
  });

  it('judges the runtime before the artifact', () => {
    expect(policyRefusal(DENY_ALL, assignment(vllm(), { uri: 'https://x', sha256: DIGEST }))).toBe('template "vllm" is not allowed');
  });
});

describe('insideRoots', () => {
  it('takes a path in a root or the root itself, never a sibling that shares its prefix', () => {
    const roots = ['/srv/models', '/data'];
    expect(insideRoots(roots, '/srv/models/m.gguf')).toBe(true);
    expect(insideRoots(roots, '/srv/models/a/b/c')).toBe(true);
    expect(insideRoots(roots, '/srv/models')).toBe(true);
    expect(insideRoots(roots, '/data/x')).toBe(true);
    expect(insideRoots(roots, '/srv/models-evil/m.gguf')).toBe(false);
    expect(insideRoots(roots, '/srv/model')).toBe(false);
    expect(insideRoots(roots, '/etc/shadow')).toBe(false);
    expect(insideRoots(roots, '/dev/zero')).toBe(false);
    expect(insideRoots([], '/srv/models/m.gguf')).toBe(false);
    // A root resolved to / (a link to it) holds everything, as it says.
    expect(insideRoots(['/'], '/etc/shadow')).toBe(true);
  });
});

describe('loadPolicy', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-policy-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const write = async (name: string, text: string, mode = 0o644) => {
    const path = join(dir, name);
    await writeFile(path, text);
    await chmod(path, mode);
    return path;
  };

  it('runs nothing when the default file is missing, and says the file was not found', async () => {
    expect(await loadPolicy({ path: join(dir, 'missing.json'), required: false })).toEqual({ found: false, path: join(dir, 'missing.json'), policy: DENY_ALL });
  });

  it('refuses to start when a file named on purpose is missing', async () => {
    await expect(loadPolicy({ path: join(dir, 'missing.json'), required: true })).rejects.toThrow(/cannot read the local policy .*missing\.json/);
  });

  it('reads a valid file', async () => {
    const path = await write('ok.json', JSON.stringify({ simulated: true, runAs: { user: 'nobody' } }));
    const loaded = await loadPolicy({ path, required: true });
    expect(loaded).toMatchObject({ found: true, path, policy: { simulated: true, runAs: { user: 'nobody' }, templates: {} } });
  });

  it('refuses a file that is not JSON, or not the schema, naming where', async () => {
    await expect(loadPolicy({ path: await write('bad.json', '{ simulated: true'), required: false })).rejects.toThrow(/is not JSON/);
    await expect(
      loadPolicy({ path: await write('typo.json', JSON.stringify({ templates: { vllm: { executable: 'vllm' } } })), required: false }),
    ).rejects.toThrow(/is invalid: templates\.vllm\.executable: an absolute path/);
  });

  it('refuses a file others may write, and one that is not a regular file', async () => {
    await expect(loadPolicy({ path: await write('open.json', '{}', 0o666), required: true })).rejects.toThrow(/writable by its group or others \(mode 666\)/);
    await expect(loadPolicy({ path: await write('group.json', '{}', 0o664), required: true })).rejects.toThrow(/writable by its group or others/);
    await expect(loadPolicy({ path: dir, required: true })).rejects.toThrow(/not a regular file|EISDIR/);
  });
});

describe('launch arguments and environment', () => {
  const values: PlaceholderValues = {
    port: '8001',
    model_path: '/srv/models/m.gguf',
    served_name: 'chat',
    gpu_indices: '0,1',
    instance: 'inst-1',
    runtime_token: 'tok',
  };

  it('fills every agent placeholder, inside an argument too, and leaves other braces alone', () => {
    expect(
      fillPlaceholders(
        [
          '--port={port}',
          '{model_path}',
          '--served-model-name',
          '{served_name}',
          '{gpu_indices}',
          '{instance}',
          '--api-key',
          '{runtime_token}',
          '{"json": {port}}',
          '{param}',
        ],
        values,
      ),
    ).toEqual(['--port=8001', '/srv/models/m.gguf', '--served-model-name', 'chat', '0,1', 'inst-1', '--api-key', 'tok', '{"json": 8001}', '{param}']);
  });

  it('fills in one pass: a value holding a placeholder is never filled again, and one argument stays one argument', () => {
    const tricky = { ...values, served_name: '{port} --trust-remote-code' };
    expect(fillPlaceholders(['{served_name}'], tricky)).toEqual(['{port} --trust-remote-code']);
  });

  it('refuses a launch whose arguments need a model path the assignment does not give', () => {
    expect(() => fillPlaceholders(['serve', '{model_path}'], { ...values, model_path: null })).toThrow(LaunchRefused);
    expect(fillPlaceholders(['serve', '--port', '{port}'], { ...values, model_path: null })).toEqual(['serve', '--port', '8001']);
  });

  it("gives a runtime only its assignment's variables and the agent's own, never the agent's environment", () => {
    process.env.LNX_POLICY_TEST_SECRET = 'hunter2';
    try {
      const env = runtimeEnv({ HF_HOME: '/srv/hf' }, { home: '/var/lib/lunanexa-runtime', port: 8001, instanceId: 'inst-1', gpuIndices: [] });
      expect(env).toEqual({ HF_HOME: '/srv/hf', PATH: SAFE_PATH, HOME: '/var/lib/lunanexa-runtime', PORT: '8001', LUNANEXA_RUNTIME_INSTANCE: 'inst-1' });
    } finally {
      delete process.env.LNX_POLICY_TEST_SECRET;
    }
    expect(SAFE_PATH).toBe('/usr/local/bin:/usr/bin:/bin');
  });

  it('sets CUDA_VISIBLE_DEVICES to the reserved GPUs, and lets no assignment override what the agent sets', () => {
    const env = runtimeEnv({ PORT: '1', PATH: '/tmp', CUDA_VISIBLE_DEVICES: '0,1,2,3' }, { home: '/h', port: 8001, instanceId: 'i', gpuIndices: [2, 3] });
    expect(env).toMatchObject({ PORT: '8001', PATH: SAFE_PATH, CUDA_VISIBLE_DEVICES: '2,3' });
  });

  it('allocates the lowest free GPUs, or none when too few are free', () => {
    expect(allocateGpus([0, 1, 2, 3], new Set(), 2)).toEqual([0, 1]);
    expect(allocateGpus([3, 2, 1, 0], new Set([0, 2]), 2)).toEqual([1, 3]);
    expect(allocateGpus([0, 1], new Set([0]), 2)).toBeNull();
    expect(allocateGpus([], new Set(), 1)).toBeNull();
    expect(allocateGpus([0], new Set(), 0)).toEqual([]);
  });
});

describe('user database entries', () => {
  it('reads a passwd line and a group line', () => {
    expect(parsePasswdLine('lunanexa-runtime:x:998:997::/var/lib/lunanexa-runtime:/usr/sbin/nologin\n')).toEqual({
      name: 'lunanexa-runtime',
      uid: 998,
      gid: 997,
      home: '/var/lib/lunanexa-runtime',
    });
    expect(parseGroupLine('video:x:44:alice,bob\n')).toEqual({ name: 'video', gid: 44 });
  });

  it('refuses anything else', () => {
    for (const line of ['', 'nobody', 'a:x:one:2::/h:/bin/sh', 'a:x:1:2::/h']) expect(() => parsePasswdLine(line), line).toThrow(/unexpected passwd entry/);
    for (const line of ['', 'video:x:video:', 'video:x:44']) expect(() => parseGroupLine(line), line).toThrow(/unexpected group entry/);
  });
});

describe('the example policy of the unit files', () => {
  it('is a valid policy', async () => {
    const example = AgentPolicy.parse(JSON.parse(await readFile('infra/systemd/agent.json.example', 'utf8')));
    expect(Object.keys(example.templates).sort()).toEqual(['llama-cpp', 'vllm']);
    expect(example.runAs).toEqual({ uids: { first: 1_879_048_192, count: 1024 }, group: 'lunanexa-runtime' });
  });
});
