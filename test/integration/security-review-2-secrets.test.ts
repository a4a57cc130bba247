import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJwt } from 'jose';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { signDesiredState } from '../../functions/services/streams.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { startStartingMachine, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

const SECRET = 'hf_SUPERSECRET_0123456789';

/** A custom Python server that allows two variables, one of them printed into its log (a model id). */
const PYRT = {
  executable: '/usr/bin/python3.11',
  executableSha256: 'a'.repeat(64),
  args: ['./rt/server.py', '--port', '{port}', '--name', '{name}'],
  params: { name: { type: 'string', pattern: '^[a-z]{1,16}$' } },
  env: ['MODEL_NAME', 'HF_TOKEN'],
};

/**
 * Second security review, M1: a runtime secret feeds only the (template, env name) pairs the admin who wrote it
 * listed. Before, an operator could bind any secret of the workspace to any variable the template allows (e.g.
 * one the runtime prints) and read it back through the runtime logs.
 */
describe('runtime secrets feed only the templates and variables their admin lists (security review 2, M1)', () => {
  let plane: TestPlane;
  let operator: string;
  let node: { machine: TestMachine; stop(): Promise<void> };

  const call = async (method: string, path: string, body?: unknown, token = plane.adminToken) => {
    const response = await fetch(`${plane.url}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, any> };
  };
  const deploy = (name: string, env: Record<string, unknown>) =>
    call(
      'PUT',
      `/deployments/${name}`,
      {
        model: 'pyrt-model',
        replicas: 1,
        selector: { site: 'lab' },
        memoryMiB: 1024,
        runtime: { kind: 'template', template: 'pyrt', params: { name: 'x' }, env },
      },
      operator,
    );
  const signed = async () => {
    const { jws } = await signDesiredState({ ctx: plane.systemCtx, input: { machineId: node.machine.machineId } });
    return (decodeJwt(jws) as unknown as { assignments: Assignment[] }).assignments;
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    operator = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'operator', role: 'operator' } })).token;
    node = await startStartingMachine(plane, 'evil-1', { site: 'lab' });
    expect((await call('PUT', '/runtime-templates/pyrt', PYRT)).status).toBe(200);
    expect((await call('PUT', '/runtime-templates/other', { ...PYRT, executable: '/usr/bin/other' })).status).toBe(200);
  });
  afterAll(async () => {
    await node?.stop();
    await plane?.stop();
  });

  it('a secret written without feeds feeds nothing: an operator binding it to any variable is refused 400', async () => {
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: SECRET })).status).toBe(200);
    for (const env of ['MODEL_NAME', 'HF_TOKEN']) {
      const refused = await deploy('pyrt-dep', { [env]: { secret: 'hf-token' } });
      expect(refused.status).toBe(400);
      expect(refused.body.error.message).toMatch(
        new RegExp(`runtime secret hf-token may not feed ${env} of template pyrt: an admin lists what it feeds .* at runtime\\.env\\.${env}`),
      );
    }
    expect((await call('GET', '/deployments/pyrt-dep')).status).toBe(404);
  });

  it('an admin lists what a secret feeds; only those pairs are accepted, and the list is shown (never the value)', async () => {
    const written = await call('PUT', '/runtime-secrets/hf-token', { value: SECRET, feeds: [{ template: 'pyrt', env: 'HF_TOKEN' }] });
    expect(written.status).toBe(200);
    expect(written.body).toMatchObject({ name: 'hf-token', feeds: [{ template: 'pyrt', env: 'HF_TOKEN' }] });
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: SECRET, feeds: [] }, operator)).status).toBe(403);
    expect((await call('GET', '/runtime-secrets', undefined, operator)).body.data).toEqual([
      { name: 'hf-token', feeds: [{ template: 'pyrt', env: 'HF_TOKEN' }], createdAt: expect.any(String), updatedAt: expect.any(String) },
    ]);
    // The reproduction of the review: bound to the variable the runtime prints.
    const leak = await deploy('pyrt-dep', { MODEL_NAME: { secret: 'hf-token' } });
    expect(leak.status).toBe(400);
    expect(leak.body.error.message).toMatch(/runtime secret hf-token may not feed MODEL_NAME of template pyrt/);
    // Another template allowing HF_TOKEN is not listed either.
    const other = await call(
      'PUT',
      '/deployments/other-dep',
      {
        model: 'm',
        replicas: 1,
        selector: { site: 'lab' },
        memoryMiB: 1024,
        runtime: { kind: 'template', template: 'other', params: { name: 'x' }, env: { HF_TOKEN: { secret: 'hf-token' } } },
      },
      operator,
    );
    expect(other.status).toBe(400);

    expect((await deploy('pyrt-dep', { HF_TOKEN: { secret: 'hf-token' } })).status).toBe(200);
    const mine = await waitFor(async () => (await signed()).find((a) => a.deploymentName === 'pyrt-dep'));
    expect(mine.runtime.kind === 'template' && mine.runtime.env.HF_TOKEN).toBe(SECRET);
  });

  it('rotating the value keeps the feeds when none are given; a narrowed list stops the deployment rendering, with the reason', async () => {
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: `${SECRET}-2` })).body.feeds).toEqual([{ template: 'pyrt', env: 'HF_TOKEN' }]);
    expect((await call('PUT', '/runtime-secrets/hf-token', { value: SECRET, feeds: [{ template: 'other', env: 'HF_TOKEN' }] })).status).toBe(200);
    // No longer delivered to the runtime, and the deployment says why its replicas are kept as they are.
    const mine = await waitFor(async () => (await signed()).find((a) => a.deploymentName === 'pyrt-dep'));
    expect(JSON.stringify(mine)).not.toContain(SECRET);
    const detail = await waitFor(async () => {
      const view = (await call('GET', '/deployments/pyrt-dep')).body;
      return view.status.degradedReasons.some((r: string) => r.includes('may not feed HF_TOKEN of template pyrt')) ? view : null;
    });
    expect(detail.status.degradedReasons.join('\n')).toMatch(/runtime does not resolve: runtime secret hf-token may not feed HF_TOKEN of template pyrt/);
  });

  it('feeds must name a template and a variable name', async () => {
    expect((await call('PUT', '/runtime-secrets/x', { value: 'v', feeds: [{ template: 'pyrt' }] })).status).toBe(400);
    expect((await call('PUT', '/runtime-secrets/x', { value: 'v', feeds: [{ template: 'pyrt', env: 'lower case' }] })).status).toBe(400);
  });
});
