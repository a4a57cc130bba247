import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * A frozen agent (SIGSTOP) keeps its TCP stream, and so its stream lease, open; its heartbeat stays fresh for
 * a keep-alive interval plus grace (35 s by default). The stream's ping is what notices it (issue 11, item 4):
 * the machine is unroutable within the ping timeout while its liveness keeps its own schedule, and requests
 * sent to it move on after the short ack timeout. Thawed, it answers again and serves again.
 */
const MODEL = 'frozen-chat';
const PING_TIMEOUT_MS = 3_000;

describe('a frozen node', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];

  const machines = async () => ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
  const routable = (m: MachineView | undefined) => m?.runtimes.some((r) => r.routable) ?? false;
  const ask = () =>
    fetch(`${plane.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
    });

  beforeAll(async () => {
    // Liveness that calls the machine stale only after 20 s: the ping must tell within seconds.
    plane = await startTestPlane({
      store: 'pglite',
      config: {
        heartbeatIntervalMs: 5_000,
        runtimeGraceMs: 15_000,
        machineLifetimeMs: 60_000,
        runtimeTtlMs: 60_000,
        streamPingMs: 500,
        streamPingTimeoutMs: PING_TIMEOUT_MS,
        invokeAckTimeoutMs: 2_000,
      },
    });
    // As fast as the runtime can: the test is about routing, not generation.
    await seedDemoDeployment(plane, 2, { loadMs: 100, memoryMiB: 256, tokensPerSecond: 0 }, { name: MODEL });
    nodes = await Promise.all(['frozen-a', 'frozen-b'].map((name) => startSimNode(plane, name, join(plane.dataDir, 'nodes'))));
    await waitFor(async () => (await machines()).filter(routable).length === 2, { timeoutMs: 90_000, what: 'both replicas to be routable' });
  }, 120_000);

  afterAll(async () => {
    for (const node of nodes) node.process.kill('SIGCONT');
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('is unroutable within the ping timeout while still ready, loses no request, and serves again once thawed', async () => {
    const frozen = nodes[0]!;
    frozen.process.kill('SIGSTOP');
    const stoppedAt = Date.now();
    // Requests meanwhile: those routed to the frozen node move on after the ack timeout.
    const answers: number[] = [];
    const asking = (async () => {
      while (Date.now() - stoppedAt < PING_TIMEOUT_MS + 2_000) answers.push((await ask()).status);
    })();
    const view = await waitFor(
      async () => {
        const m = (await machines()).find((x) => x.name === frozen.name);
        return m && !routable(m) ? m : null;
      },
      { timeoutMs: 20_000, what: 'the frozen node to be unroutable' },
    );
    const unroutableAfterMs = Date.now() - stoppedAt;
    await asking;
    // Sight is not lost yet by the liveness schedule: only the link is.
    expect(view.state).toBe('ready');
    expect(view.streamAttached).toBe(false);
    expect(unroutableAfterMs).toBeLessThan(PING_TIMEOUT_MS + 5_000);
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.every((s) => s === 200)).toBe(true);

    frozen.process.kill('SIGCONT');
    await waitFor(async () => routable((await machines()).find((x) => x.name === frozen.name)), {
      timeoutMs: 20_000,
      what: 'the thawed node to be routable again',
    });
    console.log(`frozen node: unroutable after ${unroutableAfterMs} ms (ping timeout ${PING_TIMEOUT_MS} ms), ${answers.length} requests meanwhile, all 200`);
  }, 60_000);
});
