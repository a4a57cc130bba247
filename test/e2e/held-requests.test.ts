import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * Requests during start-up (docs/design.md section 5, step 2): a request for a deployment whose replicas are still
 * loading is held until one is ready, instead of a 503, under its deadline, cancellable, and counted by
 * admission while it waits. A real control plane, a real agent, and simulated runtimes that take seconds to load.
 */

/** How long each runtime takes to load: long enough that every request below arrives well before it is ready. */
const LOAD_MS = 3_000;
const CHAT = '/v1/chat/completions';

const expectedText = (n: number) => Array.from({ length: n }, (_, i) => `tok${i} `).join('');

describe('requests held while a deployment starts', () => {
  let plane: TestPlane;
  let node: SimNode;

  const machines = async (): Promise<MachineView[]> => ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
  const chat = (model: string, opts: { stream?: boolean; headers?: Record<string, string>; signal?: AbortSignal } = {}) =>
    fetch(`${plane.url}${CHAT}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json', ...opts.headers },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello there' }], max_tokens: 6, stream: opts.stream ?? false }),
      signal: opts.signal,
    });
  const workload = async (id: string) => {
    await plane.ports.dataPlane.workloads.flush();
    return (await (await plane.admin(`/api/v1/workloads/${id}`)).json()) as {
      state: string;
      statusCode: number | null;
      errorCode: string | null;
      attempts: number;
    };
  };
  /** The id of the one workload this instance holds right now (a held request has answered nothing yet). */
  const heldWorkload = () =>
    waitFor(async () => (plane.ports.dataPlane.live.size === 1 ? [...plane.ports.dataPlane.live.keys()][0] : null), {
      timeoutMs: 5_000,
      intervalMs: 10,
      what: 'one request held',
    });

  /**
   * Declares a one-replica deployment through the API, as an operator would, and returns once this instance
   * routes for it (with no replica yet: its runtime is only starting).
   */
  async function apply(name: string, spec: Record<string, unknown> = {}): Promise<number> {
    const response = await plane.admin(`/api/v1/deployments/${name}`, {
      method: 'PUT',
      body: JSON.stringify({
        model: name,
        runtime: { kind: 'simulated', model: name, ttftMs: 20, tokensPerSecond: 200, loadMs: LOAD_MS, memoryMiB: 64 },
        replicas: 1,
        selector: { sim: 'true' },
        memoryMiB: 64,
        ...spec,
      }),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    const appliedAt = Date.now();
    // The PUT answers once this instance routes the deployment: a request sent right after it finds the model.
    const route = plane.ports.dataPlane.routing.resolve(plane.workspaceId, name)!;
    expect(route).toBeDefined();
    expect(route.replicas).toEqual([]);
    expect(route.startingReplicas).toBe(1);
    return appliedAt;
  }

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: STEADY_LIVENESS });
    node = await startSimNode(plane, 'held-1', join(plane.dataDir, 'nodes'));
    await waitFor(async () => (await machines()).some((m) => m.name === 'held-1' && m.state === 'ready'), { timeoutMs: 45_000, what: 'held-1 ready' }).catch(
      async (error: unknown) => {
        throw new Error(`${String(error)}\n${(await readFile(node.logFile, 'utf8').catch(() => '')).slice(-2_000)}`);
      },
    );
  }, 90_000);

  afterAll(async () => {
    if (node) await stopSimNodes([node]);
    await plane?.stop();
  });

  it('serves requests sent right after the deployment is applied once its runtime is ready, not 503', async () => {
    const appliedAt = await apply('held-chat');
    const [plain, streamed] = await Promise.all([chat('held-chat'), chat('held-chat', { stream: true })]);

    expect(plain.status, await plain.clone().text()).toBe(200);
    expect(((await plain.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe(expectedText(6));
    expect(streamed.status).toBe(200);
    const text = await streamed.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    // Both waited out the load: the runtime started after the PUT answered.
    expect(Date.now() - appliedAt).toBeGreaterThanOrEqual(LOAD_MS);
    // The hold is time queued, and the client is told so.
    const queued = Number(/queue;dur=([\d.]+)/.exec(plain.headers.get('server-timing') ?? '')?.[1]);
    expect(queued).toBeGreaterThan(LOAD_MS / 2);
    const served = await workload(plain.headers.get('x-lunanexa-workload-id')!);
    expect(served).toMatchObject({ state: 'succeeded', statusCode: 200, attempts: 1 });
  }, 30_000);

  it('ends a held request whose deadline comes before the runtime is ready with 504 deadline_exceeded', async () => {
    await apply('held-late');
    const deadline = Date.now() + 1_000;
    const response = await chat('held-late', { headers: { 'x-lunanexa-deadline': String(deadline) } });
    const answeredAt = Date.now();
    expect(response.status).toBe(504);
    const body = (await response.json()) as { error: { type: string; code: string } };
    expect(body.error).toMatchObject({ type: 'timeout_error', code: 'deadline_exceeded' });
    expect(answeredAt).toBeGreaterThanOrEqual(deadline - 50);
    expect(answeredAt).toBeLessThan(deadline + 1_500);
    expect(plane.ports.dataPlane.live.size).toBe(0);
  }, 30_000);

  it('counts a held request against the queue capacity, and frees its slot when the client goes away', async () => {
    await apply('held-capped', { queueCapacity: 1 });
    const client = new AbortController();
    const first = chat('held-capped', { signal: client.signal }).catch((error: unknown) => error);
    const firstId = await heldWorkload();

    // The held request fills the only admission slot: a flood while replicas start gets 429 as ever.
    const refused = await chat('held-capped');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('capacity_exceeded');

    client.abort();
    expect(await first).toBeInstanceOf(Error);
    await waitFor(async () => plane.ports.dataPlane.live.size === 0, { timeoutMs: 5_000, intervalMs: 10, what: 'the aborted request let go' });
    expect(await workload(firstId)).toMatchObject({ state: 'cancelled', attempts: 0 });

    // Its slot is free again: the next request is held in turn, and served once the runtime is ready.
    const next = await chat('held-capped');
    expect(next.status, await next.clone().text()).toBe(200);
    expect(((await next.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe(expectedText(6));
  }, 30_000);

  it('POST /api/v1/workloads/{id}/cancel ends a held request', async () => {
    await apply('held-cancel');
    const pending = chat('held-cancel');
    const id = await heldWorkload();
    const cancel = await plane.admin(`/api/v1/workloads/${id}/cancel`, { method: 'POST' });
    expect(cancel.status).toBe(202);
    const response = await pending;
    expect(response.status).toBe(499);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('cancelled');
    expect(await workload(id)).toMatchObject({ state: 'cancelled', attempts: 0 });
  }, 30_000);
});
