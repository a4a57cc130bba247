import { createServer } from 'node:http';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { createProxy, type ProxyServer } from 'proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/dev/fleet.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * Behind a corporate firewall the agent reaches the control plane only through an HTTP CONNECT proxy:
 * every outbound request (enroll, stream, heartbeat) must go through it, and NO_PROXY must bypass it.
 */
describe('agent through a real CONNECT proxy', () => {
  let plane: TestPlane;
  let proxy: ProxyServer;
  let proxyUrl: string;
  const tunnels: string[] = [];
  const nodes: SimNode[] = [];

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    proxy = createProxy(createServer());
    proxy.on('connect', (request) => tunnels.push(String(request.url)));
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await stopSimNodes(nodes);
    await new Promise((resolve) => proxy.close(resolve));
    await plane.stop();
  });

  const ready = async (name: string) => {
    const response = await plane.admin('/api/v1/machines');
    const machine = ((await response.json()) as { data: MachineView[] }).data.find((m) => m.name === name);
    return machine?.state === 'ready' && machine.streamAttached ? machine : null;
  };

  it('enrolls, streams and reports through HTTPS_PROXY/HTTP_PROXY', async () => {
    const env = { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, NO_PROXY: '' };
    nodes.push(await startSimNode(plane, 'behind-proxy', join(plane.dataDir, 'nodes'), { env }));
    await waitFor(() => ready('behind-proxy'), { timeoutMs: 30_000, what: 'node ready through the proxy' });
    const target = `127.0.0.1:${plane.port}`;
    // One tunnel for enroll, one for the agent's connection pool (stream + reports) at least.
    expect(tunnels.filter((t) => t === target).length).toBeGreaterThanOrEqual(2);
  });

  it('goes direct for hosts in NO_PROXY', async () => {
    // The node behind the proxy opens a tunnel for each new connection: stop it, so every tunnel counted
    // from here on could only come from the node that must bypass the proxy.
    await stopSimNodes(nodes.splice(0));
    const before = tunnels.length;
    const env = { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, NO_PROXY: '127.0.0.1' };
    nodes.push(await startSimNode(plane, 'bypass-proxy', join(plane.dataDir, 'nodes'), { env }));
    await waitFor(() => ready('bypass-proxy'), { timeoutMs: 30_000, what: 'node ready without the proxy' });
    expect(tunnels.length).toBe(before);
  });
});
