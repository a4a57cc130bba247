import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { buildCli, CLI_BIN, runCli } from '../helpers/cli.js';
import { TEST_INVENTORY } from '../helpers/machine.js';
import { generateMachineKey } from '../../agent/state.js';

let cli: string;

/** The CLI as a process of its own, built from the current sources (test/helpers/cli.ts). */
const lunanexa = (args: string[], env: Record<string, string | undefined>, stdin = '') => runCli(cli, args, env, stdin);

const DEPLOYMENT_YAML = `# what an operator keeps in git
name: cli-chat
model: cli-chat
runtime:
  kind: simulated
  model: cli-chat
  ttftMs: 10
  tokensPerSecond: 200
  loadMs: 200
  memoryMiB: 256
  failureRate: 0
replicas: 1
selector:
  sim: "true"
memoryMiB: 256
`;

describe('the lunanexa CLI against a real control plane and two simulated nodes', () => {
  let plane: TestPlane;
  let nodes: SimNode[];
  let dir: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    plane = await startTestPlane({ config: STEADY_LIVENESS });
    dir = await mkdtemp(join(tmpdir(), 'lnx-cli-'));
    cli = await buildCli(dir);
    nodes = await Promise.all(['cli-a', 'cli-b'].map((name) => startSimNode(plane, name, join(dir, 'nodes'))));
    // HOME and the login file in a throwaway directory: the test never reads or writes the user's own.
    env = { LUNANEXA_URL: plane.url, LUNANEXA_TOKEN: plane.adminToken, HOME: dir, LUNANEXA_CONFIG: join(dir, 'login.json') };
    await waitFor(
      async () => {
        const list = (await (await plane.admin('/api/v1/machines')).json()) as { data: Array<{ state: string }> };
        return list.data.filter((m) => m.state === 'ready').length === 2;
      },
      { timeoutMs: 60_000, what: 'two ready machines' },
    );
  }, 120_000);
  afterAll(async () => {
    await stopSimNodes(nodes ?? []);
    await plane?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('applies a deployment from YAML and waits for its rollout, with progress on stderr and the result on stdout', async () => {
    await writeFile(join(dir, 'cli-chat.yaml'), DEPLOYMENT_YAML);
    const applied = await lunanexa(['deployments', 'apply', '-f', join(dir, 'cli-chat.yaml'), '--wait', '--timeout', '90', '--json'], env);
    expect(applied.stderr).toContain('rolling out cli-chat: 1/1 ready');
    expect(applied.code).toBe(0);
    const detail = JSON.parse(applied.stdout) as { name: string; status: { ready: number; rollout: { state: string } } };
    expect(detail).toMatchObject({ name: 'cli-chat', status: { ready: 1, rollout: { state: 'complete' } } });

    const listed = await lunanexa(['deployments', 'ls'], env);
    expect(listed.stdout.split('\n')[0]).toMatch(/^NAME\s+MODEL\s+REPLICAS\s+READY\s+STARTING\s+UNPLACEABLE/);
    expect(listed.stdout).toMatch(/cli-chat\s+cli-chat\s+1\s+1/);
    const shown = await lunanexa(['deployments', 'show', 'cli-chat'], env);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain('replicas:    1/1 ready');
    expect(shown.stdout).toMatch(/rollout:\s+complete/);
  }, 120_000);

  it('drains a machine and waits until its replica has moved, then uncordons it', async () => {
    const before = JSON.parse((await lunanexa(['deployments', 'show', 'cli-chat', '--json'], env)).stdout) as {
      status: { replicas: Array<{ machineName: string; desired: boolean }> };
    };
    const host = before.status.replicas.find((r) => r.desired)!.machineName;
    const drained = await lunanexa(['machines', 'drain', host, '--wait', '--timeout', '90'], env);
    expect(drained.code).toBe(0);
    expect(drained.stderr).toContain(`draining ${host}: empty`);
    expect(drained.stdout).toContain(`${host}: drained`);
    const after = JSON.parse((await lunanexa(['deployments', 'show', 'cli-chat', '--json'], env)).stdout) as {
      status: { ready: number; replicas: Array<{ machineName: string; desired: boolean }> };
    };
    expect(after.status.ready).toBe(1);
    expect(after.status.replicas.filter((r) => r.desired).map((r) => r.machineName)).toEqual([host === 'cli-a' ? 'cli-b' : 'cli-a']);
    const cordoned = await lunanexa(['machines', 'cordon', host, '--json'], env);
    expect(JSON.parse(cordoned.stdout)).toMatchObject({ name: host, cordoned: true, draining: true });
    // Uncordon ends the drain too: the machine takes placements again.
    expect((await lunanexa(['machines', 'uncordon', host], env)).stdout).toContain(`${host}: schedulable`);
  }, 150_000);

  it('scales and waits, then lists machines and shows one with its runtimes', async () => {
    const scaled = await lunanexa(['deployments', 'scale', 'cli-chat', '2', '--wait', '--timeout', '90'], env);
    expect(scaled.code).toBe(0);
    expect(scaled.stdout).toContain('cli-chat: 2 replicas, all serving');
    const api = (await (await plane.admin('/api/v1/deployments/cli-chat')).json()) as { replicas: number; status: { ready: number } };
    expect(api).toMatchObject({ replicas: 2, status: { ready: 2 } });

    const machines = await lunanexa(['machines', 'ls'], env);
    expect(machines.stdout.split('\n')[0]).toMatch(/^NAME\s+STATE\s+HEARTBEAT\s+STREAM\s+GPUS\s+FREE/);
    expect(machines.stdout).toMatch(/cli-a\s+ready/);
    const shown = await lunanexa(['machines', 'show', 'cli-a'], env);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/cli-chat\s+cli-chat\s+ready\s+yes/);
    expect(shown.stdout).toMatch(/RESOURCE\s+CAPACITY\s+REPLICAS\s+WORKERS\s+FREE\n/);
    expect(shown.stdout).toMatch(/\ncores\s+\d+\s+0\s+0\s+\d+/);
    const json = JSON.parse((await lunanexa(['machines', 'show', 'cli-b', '--json'], env)).stdout) as { name: string; runtimes: unknown[] };
    expect(json.name).toBe('cli-b');
    expect(json.runtimes).toHaveLength(1);
  }, 120_000);

  it("tails a runtime's log from its node", async () => {
    const logs = await lunanexa(['logs', 'cli-a', 'cli-chat', '--lines', '20'], env);
    expect(logs.code).toBe(0);
    expect(logs.stdout.trim().length).toBeGreaterThan(0);
    const wrong = await lunanexa(['logs', 'cli-a', 'no-such-runtime'], env);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('runs no replica no-such-runtime');
  });

  it('creates an enrollment token that is shown once', async () => {
    const created = await lunanexa(['enroll-tokens', 'create', '--name', 'cli-c', '--label', 'sim=true', '--json'], env);
    expect(created.code).toBe(0);
    expect(JSON.parse(created.stdout)).toMatchObject({ name: 'cli-c', labels: { sim: 'true' }, token: expect.any(String) });
    expect((await lunanexa(['enroll-tokens', 'create', '--label', 'nolabel'], env)).code).toBe(2);
  });

  it('lists enrollment tokens without their secrets and revokes one, which then enrolls nothing', async () => {
    const created = JSON.parse((await lunanexa(['enroll-tokens', 'create', '--name', 'cli-leaked', '--label', 'sim=true', '--json'], env)).stdout) as {
      id: string;
      token: string;
    };
    const listed = await lunanexa(['enroll-tokens', 'ls'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout.split('\n')[0]).toMatch(/^ID\s+NAME\s+LABELS\s+STATE\s+EXPIRES\s+MACHINE/);
    expect(listed.stdout).toMatch(new RegExp(`${created.id}\\s+cli-leaked\\s+sim=true\\s+active`));
    expect(listed.stdout).not.toContain(created.token);
    const json = await lunanexa(['enroll-tokens', 'ls', '--json'], env);
    expect(json.stdout).not.toContain(created.token);

    const revoked = await lunanexa(['enroll-tokens', 'revoke', created.id], env);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toContain(`${created.id} (cli-leaked): revoked at`);
    expect((await lunanexa(['enroll-tokens', 'ls'], env)).stdout).toMatch(new RegExp(`${created.id}\\s+cli-leaked\\s+sim=true\\s+revoked`));
    const again = await lunanexa(['enroll-tokens', 'revoke', created.id], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already revoked');
    const key = await generateMachineKey();
    const enroll = await fetch(`${plane.url}/agent/v1/enroll`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: created.token, name: 'cli-leaked', publicKey: key.publicJwk, inventory: TEST_INVENTORY }),
    });
    expect(enroll.status).toBe(401);
    expect(((await enroll.json()) as { error: { code: string } }).error.code).toBe('enrollment_token_revoked');
  });

  it('creates an inference token limited to one model, lists it without its secret, and revokes it', async () => {
    const created = await lunanexa(
      ['tokens', 'create', 'app-team', '--role', 'inference', '--model', 'cli-chat', '--rate-limit', '600', '--ttl', '3600', '--json'],
      env,
    );
    expect(created.code).toBe(0);
    const token = JSON.parse(created.stdout) as { id: string; token: string; models: string[]; rateLimitPerMinute: number; expiresAt: string };
    expect(token).toMatchObject({ models: ['cli-chat'], rateLimitPerMinute: 600, expiresAt: expect.any(String) });
    const chat = (secret: string) =>
      fetch(`${plane.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'cli-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
      });
    const answer = await chat(token.token);
    expect(answer.status).toBe(200);
    const usage = ((await answer.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;

    const listed = await lunanexa(['tokens', 'ls'], env);
    expect(listed.stdout).toMatch(/app-team\s+inference\s+active\s+-\s+models: cli-chat 600\/min/);
    expect(listed.stdout).not.toContain(token.token);

    const report = await lunanexa(['usage', '--by', 'token,model', '--json'], env);
    expect(report.code).toBe(0);
    const row = (
      JSON.parse(report.stdout) as { data: Array<{ tokenId: string; model: string; requests: number; promptTokens: number; completionTokens: number }> }
    ).data.find((r) => r.tokenId === token.id);
    expect(row).toEqual(
      expect.objectContaining({ model: 'cli-chat', requests: 1, promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens }),
    );
    const csv = await lunanexa(['usage', '--by', 'token', '--csv'], env);
    expect(csv.stdout.split(/\r?\n/)[0]).toBe('day,tokenId,tokenName,model,requests,promptTokens,completionTokens');
    expect(csv.stdout).toContain(`,${token.id},app-team,,1,${usage.prompt_tokens},${usage.completion_tokens}`);

    const revoked = await lunanexa(['tokens', 'revoke', token.id], env);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toContain('app-team');
    expect((await chat(token.token)).status).toBe(401);
    expect((await lunanexa(['tokens', 'create', 'x', '--role', 'overlord'], env)).code).toBe(2);
  }, 60_000);

  it('lists, exports and verifies the audit chain here, and finds an edited export', async () => {
    const listed = await lunanexa(['audit', 'ls', '--action', 'api_token.revoke', '--json'], env);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ action: 'api_token.revoke', outcome: 'succeeded' })]);
    const verified = await lunanexa(['audit', 'verify'], env);
    expect(verified.code).toBe(0);
    expect(verified.stdout).toMatch(/^intact: \d+ entries; head [0-9a-f]{64}/);

    const file = join(dir, 'audit.jsonl');
    expect((await lunanexa(['audit', 'export', '-o', file], env)).code).toBe(0);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const lines = (await readFile(file, 'utf8')).trim().split('\n');
    expect(lines.length).toBeGreaterThan(5);
    // Someone rewrites what an entry was about, in an archived copy: the chain no longer holds at that entry.
    const edited = lines.map((line, i) => (i === 2 ? line.replace(/"target":"([^"]*)"/, '"target":"$1-elsewhere"') : line));
    expect(edited[2]).not.toBe(lines[2]);
    await writeFile(join(dir, 'edited.jsonl'), `${edited.join('\n')}\n`);
    const broken = await lunanexa(['audit', 'verify', '--file', join(dir, 'edited.jsonl'), '--json'], env);
    expect(broken.code).toBe(4);
    expect(JSON.parse(broken.stdout)).toMatchObject({ ok: false, brokenAt: { seq: 3 } });
    // (A removed, inserted or reordered entry, and the intact export, are in test/integration/audit.test.ts.)
    expect((await lunanexa(['audit', 'verify', '--file', join(dir, 'no-such.jsonl')], env)).code).toBe(2);
  }, 60_000);

  it('logs in with a token from standard input, saves it readable only by its owner, and uses it', async () => {
    const noEnv = { HOME: dir, LUNANEXA_CONFIG: env.LUNANEXA_CONFIG };
    expect((await lunanexa(['status'], noEnv)).code).toBe(2);
    const bad = await lunanexa(['login', '--url', plane.url], noEnv, 'lnx_not_a_token\n');
    expect(bad.code).toBe(1);
    await expect(stat(env.LUNANEXA_CONFIG!)).rejects.toThrow();
    const login = await lunanexa(['login', '--url', plane.url], noEnv, `${plane.adminToken}\n`);
    expect(login.code).toBe(0);
    expect(login.stdout).not.toContain(plane.adminToken);
    expect((await stat(env.LUNANEXA_CONFIG!)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(env.LUNANEXA_CONFIG!, 'utf8'))).toEqual({ url: plane.url, token: plane.adminToken });
    const status = await lunanexa(['status', '--json'], noEnv);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ machines: 2, deployments: 1 });
    expect((await lunanexa(['logout'], noEnv)).code).toBe(0);
    expect((await lunanexa(['status'], noEnv)).code).toBe(2);
  });

  it('says what to fix, with exit code 1 when the API refuses, 2 when the command is wrong, 3 when a wait runs out', async () => {
    // Through the bin itself, as `npx lunanexa` runs it (tsx over the sources).
    const refused = await runCli(CLI_BIN, ['status'], { ...env, LUNANEXA_TOKEN: 'lnx_not_a_token' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('HTTP 401');
    expect(refused.stderr).toContain('LUNANEXA_TOKEN');
    expect(refused.stderr).not.toContain('lnx_not_a_token');
    const unreachable = await lunanexa(['status', '--url', 'http://127.0.0.1:9'], env);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain('cannot reach');
    expect((await lunanexa(['frobnicate'], env)).code).toBe(2);
    expect((await lunanexa(['deployments', 'scale', 'cli-chat', 'many'], env)).code).toBe(2);
    await writeFile(join(dir, 'bad.yaml'), 'name: Not_A_Name\nreplicas: 1\n');
    const badFile = await lunanexa(['deployments', 'apply', '-f', join(dir, 'bad.yaml')], env);
    expect(badFile.code).toBe(2);
    expect(badFile.stderr).toContain('needs a `name`');
    const missing = await lunanexa(['machines', 'show', 'no-such-machine'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('no machine named no-such-machine');
    // Four replicas on two machines cannot all be placed: the wait runs out with exit code 3.
    const stuck = await lunanexa(['deployments', 'scale', 'cli-chat', '4', '--wait', '--timeout', '2'], env);
    expect(stuck.code).toBe(3);
    expect(stuck.stderr).toMatch(/still not done after 2 s .*unplaceable/);
  }, 60_000);
});
