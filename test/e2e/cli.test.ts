import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { seedDemoDeployment } from '../../functions/dev/fleet.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

const BIN = fileURLToPath(new URL('../../bin/lunanexa.mjs', import.meta.url));

/** Runs the CLI as `npx lunanexa` does (its bin, through tsx); never throws, so that exit codes can be checked. */
function lunanexa(args: string[], env: Record<string, string | undefined>): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [BIN, ...args], { env: { PATH: process.env.PATH, ...env }, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
    child.stdin?.end();
  });
}

describe('the lunanexa CLI against a real control plane', () => {
  let plane: TestPlane;
  let env: Record<string, string>;

  beforeAll(async () => {
    plane = await startTestPlane();
    await seedDemoDeployment(plane, 2);
    env = { LUNANEXA_URL: plane.url, LUNANEXA_TOKEN: plane.adminToken };
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  it('summarises the fleet, for people and for scripts', async () => {
    const human = await lunanexa(['status'], env);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain('deployments: 1');
    const json = await lunanexa(['status', '--json'], env);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({ machines: 0, byState: {}, deployments: 1 });
  });

  it('lists deployments as a table and as JSON that matches the API', async () => {
    const human = await lunanexa(['deployments', 'ls'], env);
    expect(human.code).toBe(0);
    expect(human.stdout.split('\n')[0]).toMatch(/^NAME\s+MODEL\s+REPLICAS/);
    expect(human.stdout).toMatch(/sim-chat\s+sim-chat\s+2\s+1/);
    const json = await lunanexa(['deployments', 'ls', '--json'], env);
    const api = (await (await plane.admin('/api/v1/deployments')).json()) as { data: unknown[] };
    expect(JSON.parse(json.stdout)).toEqual(api.data);
    expect((await lunanexa(['machines', 'ls', '--json'], env)).stdout.trim()).toBe('[]');
  });

  it('says what to fix, with exit code 1 when the API refuses and 2 when the command is wrong or unconfigured', async () => {
    const refused = await lunanexa(['status'], { ...env, LUNANEXA_TOKEN: 'lnx_not_a_token' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('HTTP 401');
    expect(refused.stderr).toContain('LUNANEXA_TOKEN');
    expect(refused.stderr).not.toContain('lnx_not_a_token');
    const unreachable = await lunanexa(['status', '--url', 'http://127.0.0.1:9'], env);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain('cannot reach');
    const noToken = await lunanexa(['status'], { LUNANEXA_URL: plane.url });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain('set LUNANEXA_TOKEN');
    expect((await lunanexa(['status'], { LUNANEXA_TOKEN: plane.adminToken })).code).toBe(2);
    expect((await lunanexa(['frobnicate'], env)).code).toBe(2);
  });
});
