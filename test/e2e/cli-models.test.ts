import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import type { AliasView, VersionView } from '../../shared/contracts/registry.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { buildCli, runCli } from '../helpers/cli.js';

let cli: string;
const lunanexa = (args: string[], env: Record<string, string>) => runCli(cli, args, env);

/** A model's folder as an operator has it, and the manifest that describes it. */
const FILES: Record<string, string> = { 'config.json': '{"hidden_size":64}', 'model.gguf': 'GGUF'.repeat(4096), 'tokenizer/tokenizer.json': '{"model":{}}' };
const manifest = {
  files: Object.entries(FILES).map(([path, text]) => ({ path, size: Buffer.byteLength(text), sha256: createHash('sha256').update(text).digest('hex') })),
};

/**
 * The registry's CLI (docs/registry.md, docs/cli.md) against one real control plane, no agents: 15 CLI runs,
 * each a process of its own, in 12 steps.
 */
describe('lunanexa models and aliases against a real control plane', () => {
  let plane: TestPlane;
  let dir: string;
  let env: Record<string, string>;
  const run = async (...args: string[]) => {
    const result = await lunanexa(args, env);
    expect(result.code, `lunanexa ${args.join(' ')}: ${result.stderr}${result.stdout}`).toBe(0);
    return result;
  };
  const json = async <T>(...args: string[]) => JSON.parse((await run(...args, '--json')).stdout) as T;

  /** Copies the folder into the plane's artifact store as `version` of cli-llama. */
  const place = async (version: string) => {
    for (const [path, text] of Object.entries(FILES)) {
      const file = join(plane.dataDir, 'artifacts', plane.workspaceId, 'cli-llama', version, path);
      await mkdir(dirname(file), { recursive: true });
      await writeFile(file, text);
    }
  };

  beforeAll(async () => {
    plane = await startTestPlane();
    dir = await mkdtemp(join(tmpdir(), 'lnx-cli-models-'));
    cli = await buildCli(dir);
    env = { LUNANEXA_URL: plane.url, LUNANEXA_TOKEN: plane.adminToken, HOME: dir, LUNANEXA_CONFIG: join(dir, 'login.json') };
    await writeFile(join(dir, 'manifest.yaml'), toYaml(manifest));
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('registers, documents, verifies, evaluates and approves a version, then moves an alias and rolls it back', async () => {
    // Each CLI run is a process of its own (about a second): the model comes through the API, and runs that do not
    // depend on each other run side by side.
    expect((await plane.admin('/api/v1/models', { method: 'POST', body: JSON.stringify({ name: 'cli-llama' }) })).status).toBe(201);
    await place('v1');
    const candidate = await json<VersionView>('models', 'register', 'cli-llama', '--version', 'v1', '-f', join(dir, 'manifest.yaml'));
    expect(candidate).toMatchObject({ state: 'candidate', format: 'gguf', fileCount: 3 });
    await run('models', 'provenance', 'cli-llama', 'v1', '--licence', 'MIT', '--source', 'huggingface:acme/cli-llama', '--revision', 'abc123');
    expect((await json<VersionView>('models', 'verify', 'cli-llama', 'v1')).state).toBe('verified');
    const evaluated = await json<VersionView>(
      'models',
      'evaluate',
      'cli-llama',
      'v1',
      '--suite',
      'smoke',
      '--passed',
      '--metric',
      'accuracy=0.9',
      '--metric',
      'p95_ms=800',
    );
    expect(evaluated.evaluations[0]?.metrics).toEqual({ accuracy: 0.9, p95_ms: 800 });
    expect((await json<VersionView>('models', 'approve', 'cli-llama', 'v1', '--reason', 'smoke passed')).state).toBe('approved');

    // A second approved version, through the API: the CLI's part is the alias moves.
    await place('v2');
    const v2 = '/api/v1/models/cli-llama/versions/v2';
    for (const [path, body] of [
      ['/api/v1/models/cli-llama/versions', { version: 'v2', format: 'gguf', manifest }],
      [`${v2}/provenance`, { licence: 'MIT', provenance: { source: 'huggingface:acme/cli-llama' } }],
      [`${v2}/verify`, undefined],
      [`${v2}/evaluations`, { suite: 'smoke', passed: true }],
      [`${v2}/approval`, { decision: 'approve', reason: 'smoke passed' }],
    ] as const) {
      const response = await plane.admin(path, { method: 'POST', body: body === undefined ? undefined : JSON.stringify(body) });
      expect(response.status, `${path}: ${await response.clone().text()}`).toBeLessThan(300);
    }
    const [show] = await Promise.all([run('models', 'show', 'cli-llama'), run('aliases', 'set', 'chat-default', 'cli-llama', 'v1', '--reason', 'first')]);
    expect(show.stdout).toMatch(/v2\s+approved/);
    expect((await json<AliasView>('aliases', 'set', 'chat-default', 'cli-llama', 'v2', '--reason', 'better')).version).toBe('v2');
    expect((await json<AliasView>('aliases', 'rollback', 'chat-default', '--reason', 'v2 regressed')).version).toBe('v1');
    expect((await run('aliases', 'ls')).stdout).toMatch(/chat-default\s+cli-llama\s+v1/);
  }, 60_000);

  it('creates a model; exits 4 when verification finds a file that does not match, 1 when the lifecycle refuses, 2 on a bad flag', async () => {
    await place('v3');
    await writeFile(join(plane.dataDir, 'artifacts', plane.workspaceId, 'cli-llama', 'v3', 'config.json'), '{"hidden_size":65}');
    const [created] = await Promise.all([
      json<{ name: string }>('models', 'create', 'cli-other', '--description', 'made by the CLI'),
      run('models', 'register', 'cli-llama', '--version', 'v3', '-f', join(dir, 'manifest.yaml')),
    ]);
    expect(created.name).toBe('cli-other');
    const [early, badFlags] = await Promise.all([
      lunanexa(['models', 'approve', 'cli-llama', 'v3', '--reason', 'too soon'], env),
      lunanexa(['models', 'evaluate', 'cli-llama', 'v3', '--suite', 'smoke'], env),
    ]);
    expect(early.code).toBe(1);
    expect(early.stderr).toContain('a version must be evaluated before it is approved (it is candidate)');
    expect(badFlags.code).toBe(2);
    await plane.admin('/api/v1/models/cli-llama/versions/v3/provenance', {
      method: 'POST',
      body: JSON.stringify({ licence: 'MIT', provenance: { source: 'huggingface:acme/cli-llama' } }),
    });
    const verify = await lunanexa(['models', 'verify', 'cli-llama', 'v3'], env);
    expect(verify.code).toBe(4);
    expect(verify.stdout).toContain('config.json: digest mismatch');
  }, 60_000);
  it('sets the placement policy, starts a canary from a deployment file, refuses a gate it cannot run, and rolls the canary back', async () => {
    await writeFile(join(dir, 'policy.yaml'), toYaml({ quota: { gpus: 4 }, dataClasses: { internal: { runtimes: ['simulated'] } } }));
    await writeFile(
      join(dir, 'chat.yaml'),
      toYaml({
        name: 'cli-chat',
        model: 'cli-chat',
        source: { kind: 'alias', alias: 'chat-default' },
        canary: { version: 'v2', weight: 10 },
        dataClass: 'internal',
        runtime: { kind: 'simulated', model: 'cli-chat', ttftMs: 5, tokensPerSecond: 0, loadMs: 10, memoryMiB: 64, failureRate: 0 },
        replicas: 0,
      }),
    );
    const policy = await json<{ quota: { gpus: number } }>('policy', 'set', '-f', join(dir, 'policy.yaml'));
    expect(policy.quota).toEqual({ gpus: 4 });
    const [shown] = await Promise.all([run('policy', 'show'), run('deployments', 'apply', '-f', join(dir, 'chat.yaml'))]);
    expect(shown.stdout).toMatch(/quota: gpus 4/);
    expect(shown.stdout).toMatch(/internal\s+any machine\s+simulated\s+none/);
    const [gate, promote, benchmarks] = await Promise.all([
      lunanexa(['deployments', 'gate', 'cli-chat', '--requests', '2'], env),
      lunanexa(['models', 'promote', 'cli-llama', 'v2', '--alias', 'chat-default', '--reason', 'too soon'], env),
      run('models', 'benchmarks', 'cli-llama', 'v2'),
    ]);
    expect(gate.code).toBe(1);
    expect(gate.stderr).toContain('the canary is not ready: 0 of 1 replicas of cli-llama v2 serve');
    expect(promote.code).toBe(1);
    expect(promote.stderr).toContain("must pass its canary's readiness and benchmark gate");
    expect(benchmarks.stdout).toContain('no gate runs yet');
    const rolled = await json<{ version: VersionView; endedCanaries: string[] }>('models', 'rollback', 'cli-llama', 'v2', '--reason', 'canary regressed');
    expect(rolled).toMatchObject({ version: { state: 'rolled_back' }, endedCanaries: ['cli-chat'] });
  }, 60_000);
});
