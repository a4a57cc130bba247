import { createServer, request, type Server } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { MachineView } from '../../shared/contracts/machine.js';
import { loadIdentity } from '../../agent/state.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/** Long enough to tell a retry from the next regular report apart on a loaded machine. */
const INTERVAL_MS = 6_000;

/** The agent's first heartbeats that the proxy fails: the one at start and the one after its desired state, and one more. */
const FAILED_HEARTBEATS = 3;

/**
 * A failed heartbeat is retried at once (docs/design.md section 4, liveness), not at the next interval: a real agent
 * behind a real HTTP proxy that answers its first heartbeats 503 in the control plane's place.
 */
describe('heartbeat retry', () => {
  let plane: TestPlane;
  let proxy: Server;
  let proxyUrl: string;
  let node: SimNode;
  /** performance.now() of each heartbeat the proxy failed, and of each it let through. */
  const failed: number[] = [];
  const passed: number[] = [];

  beforeAll(async () => {
    plane = await startTestPlane({
      store: 'pglite',
      config: {
        heartbeatIntervalMs: INTERVAL_MS,
        runtimeGraceMs: 4_000,
        machineLifetimeMs: 30_000,
        runtimeTtlMs: 30_000,
        streamKeepAliveMs: 1_000,
        streamLeaseTtlMs: 6_000,
      },
    });
    proxy = createServer((req, res) => {
      const heartbeat = req.method === 'POST' && req.url === '/agent/v1/heartbeat';
      if (heartbeat && failed.length < FAILED_HEARTBEATS) {
        failed.push(performance.now());
        req.resume();
        req.on('end', () => {
          res.writeHead(503, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { code: 'unavailable', message: 'the proxy fails this heartbeat', requestId: 'proxy' } }));
        });
        return;
      }
      if (heartbeat) passed.push(performance.now());
      const upstream = request(new URL(req.url!, plane.url), { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      // The stream's client went away: so does its upstream connection.
      res.on('close', () => upstream.destroy());
      req.pipe(upstream);
    });
    const port = await new Promise<number>((done) => proxy.listen(0, '127.0.0.1', () => done((proxy.address() as { port: number }).port)));
    proxyUrl = `http://127.0.0.1:${port}`;
    // Enrolled and run through the proxy: every agent request goes by it.
    node = await startSimNode({ ...plane, url: proxyUrl }, 'retrying', join(plane.dataDir, 'nodes'));
  }, 90_000);
  afterAll(async () => {
    if (node) await stopSimNodes([node]);
    proxy?.closeAllConnections();
    await new Promise((done) => proxy?.close(done));
    await plane?.stop();
  });

  it('is ready well before the next interval after its first heartbeats failed', async () => {
    const { machineId } = await waitFor(() => loadIdentity(node.stateDir), { what: 'the identity' });
    const machine = await waitFor(
      async () => {
        const view = MachineView.parse(await (await plane.admin(`/api/v1/machines/${machineId}`)).json());
        return view.state === 'ready' ? view : null;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: 'the machine to be ready' },
    );
    expect(machine.state).toBe('ready');
    expect(failed).toHaveLength(FAILED_HEARTBEATS);
    expect(passed.length).toBeGreaterThanOrEqual(1);
    // Three failures in a row, then through: retries at 200, 400 and 800 ms ceilings, well under the 5.4 s that
    // the next regular report could come at.
    const recovered = passed[0]! - failed[0]!;
    expect(recovered).toBeLessThan(3_000);
    expect(recovered).toBeLessThan(INTERVAL_MS * 0.9);
  });
});
