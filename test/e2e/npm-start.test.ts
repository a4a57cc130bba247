import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI from 'openai';
import { connect } from 'node:net';
import pg from 'pg';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { freePort } from '../../agent/runtimes/process.js';
import { DeploymentDetail } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { startNpmStart, type NpmStart } from '../helpers/npm-start.js';
import { waitFor } from '../helpers/plane.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';

/**
 * The public contract of docs/design.md section 10: `npm start` on a fresh data dir, then Ctrl-C. One boot serves
 * the demo and the autoscaling scenario (docs/autoscaling.md), for which the controller passes every second: the
 * autoscaler samples once a pass.
 */
describe('npm start', () => {
  let fleet: NpmStart;
  beforeAll(async () => {
    fleet = await startNpmStart({ LUNANEXA_RECONCILE_INTERVAL_MS: '1000' });
  }, 120_000);
  afterAll(async () => await fleet?.stop(), 60_000);

  it('serves four ready simulated nodes with sim-chat (answering the openai client) and an admin token file', async () => {
    expect((await stat(join(fleet.dataDir, 'admin.token'))).mode & 0o777).toBe(0o600);
    // The moment the launcher says the demo is ready, the first request succeeds.
    const first = await fetch(`${fleet.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${fleet.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'first' }], max_tokens: 2 }),
    });
    expect(first.status, await first.clone().text()).toBe(200);
    const machines = await waitFor(
      async () => {
        const data = ((await (await fleet.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
        return data.length === 4 && data.every((m) => m.state === 'ready' && m.runtimes[0]?.routable) ? data : null;
      },
      { timeoutMs: 90_000, intervalMs: 250, what: 'four routable simulated nodes' },
    );
    // The list pages in enrollment order; the four enroll concurrently.
    expect(machines.map((m) => m.name).sort()).toEqual(['dgx-1', 'dgx-2', 'dgx-3', 'dgx-4']);
    expect(machines.every((m) => m.runtimes[0]!.model === 'sim-chat')).toBe(true);
    if (process.getuid?.() === 0) {
      // Run as root, each node's runtime runs as a uid of the node's own range (never `nobody`, which other software
      // shares): four runtimes, four uids, none another's.
      const uids = (await runtimeFiles()).map(({ pid, uid }) => {
        expect(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]).toBe(String(uid));
        return uid;
      });
      expect(new Set(uids).size).toBe(4);
      expect(uids.every((uid) => uid >= 2_013_265_920)).toBe(true);
    }
    expect(fleet.output()).toContain(fleet.url);
    expect((await fetch(`${fleet.url}/readyz`)).status).toBe(200);

    // The official client against the real `npm start` fleet: the demo model answers through the relay.
    const client = new OpenAI({ baseURL: `${fleet.url}/v1`, apiKey: fleet.token, maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toContain('sim-chat');
    const completion = await client.chat.completions.create({ model: 'sim-chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
    expect(completion.choices[0]!.message.content).toBe('tok0 tok1 tok2 tok3 ');
    let streamed = '';
    for await (const chunk of await client.chat.completions.create({
      model: 'sim-chat',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 3,
      stream: true,
    })) {
      streamed += chunk.choices[0]?.delta.content ?? '';
    }
    expect(streamed).toBe('tok0 tok1 tok2 ');
  }, 120_000);

  const status = async () => DeploymentDetail.parse(await (await fleet.admin('/api/v1/deployments/sim-auto')).json());

  /** `clients` loops of requests until `stop()`; every answer's status is kept. */
  function load(clients: number) {
    let running = true;
    const statuses: number[] = [];
    const loops = Array.from({ length: clients }, async () => {
      while (running) {
        try {
          const answer = await fetch(`${fleet.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${fleet.token}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'sim-auto', messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 }),
          });
          await answer.arrayBuffer();
          statuses.push(answer.status);
        } catch {
          // No answer at all: a failed request as well.
          statuses.push(0);
        }
      }
    });
    return {
      statuses,
      stop: async () => {
        running = false;
        await Promise.all(loops);
      },
    };
  }

  it('scales out under a burst, holds its target, scales in after it with no failed request, and sleeps at zero when idle', async () => {
    const put = await fleet.admin('/api/v1/deployments/sim-auto', {
      method: 'PUT',
      body: JSON.stringify({
        model: 'sim-auto',
        runtime: { kind: 'simulated', model: 'sim-auto', ttftMs: 100, tokensPerSecond: 20, loadMs: 500, memoryMiB: 1024, failureRate: 0 },
        replicas: 1,
        selector: { sim: 'true' },
        memoryMiB: 1024,
        maxConcurrency: 8,
        autoscale: { minReplicas: 0, maxReplicas: 4, target: { metric: 'inFlightPerReplica', value: 2 }, scaleUpAfterMs: 2_000, scaleDownAfterMs: 4_000 },
      }),
    });
    expect(put.status, await put.clone().text()).toBe(200);
    await waitFor(async () => ((await status()).status.ready === 1 ? true : null), { timeoutMs: 30_000, what: 'one replica serving' });

    // The replica counts over the whole run, every quarter second.
    const seen: Array<{ t: number; desired: number; ready: number }> = [];
    const started = Date.now();
    let watching = true;
    let lastReason = '';
    const watch = (async () => {
      while (watching) {
        const { status: s } = await status();
        seen.push({ t: Date.now() - started, desired: s.desired, ready: s.ready });
        if (s.autoscaler && s.autoscaler.reason !== lastReason)
          console.log(`${Date.now() - started} ms: ${s.ready}/${s.desired} ${s.autoscaler.action}: ${(lastReason = s.autoscaler.reason)}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    })();
    const phase = (from: number) => seen.filter((s) => s.t >= from);

    const low = load(2);
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    // Two in flight on one replica is its target: it holds.
    expect(phase(0).every((s) => s.desired === 1)).toBe(true);

    const burst = load(6);
    // Eight in flight wants four replicas: it scales out (in one step or two, as the samples say) and they serve.
    const out = await waitFor(
      async () => {
        const { status: s } = await status();
        return s.desired >= 3 && s.ready === s.desired ? { t: Date.now() - started, desired: s.desired } : null;
      },
      { timeoutMs: 40_000, intervalMs: 250, what: 'three or four replicas serving the burst' },
    );
    // Near its target while the burst lasts, it never scales in under it.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    expect(phase(out.t).every((s) => s.desired >= out.desired)).toBe(true);
    await burst.stop();

    const after = Date.now() - started;
    await waitFor(async () => ((await status()).status.desired === 1 ? true : null), {
      timeoutMs: 60_000,
      intervalMs: 250,
      what: 'scaled back to one replica',
    });
    // Down in steps, never up again on the way.
    const down = phase(after).map((s) => s.desired);
    expect(down.every((n, i) => i === 0 || n <= down[i - 1]!)).toBe(true);
    await low.stop();
    await waitFor(async () => ((await status()).status.asleep ? true : null), { timeoutMs: 30_000, intervalMs: 250, what: 'asleep at zero' });
    watching = false;
    await watch;

    // No request failed through the scale-out, the scale-in and the drain of the retired replicas.
    const statuses = [...low.statuses, ...burst.statuses];
    expect(statuses.length).toBeGreaterThan(50);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);

    const detail = await status();
    expect(detail.status.desired).toBe(0);
    const scaled = detail.events.filter((e) => e.type === 'scaled').map((e) => e.message!);
    // Out in one step or two: the first sample may see the burst's clients not all started yet.
    expect(scaled.some((m) => /^scaled from 1 to [234]: in flight [\d.]+ per replica \(target 2\)/.test(m))).toBe(true);
    expect(scaled.some((m) => /^scaled from \d to [12]: in flight [\d.]+ per replica \(target 2\)/.test(m))).toBe(true);
    // Its last replica drains after it went to sleep: the sleep is the last decision, not the last event.
    expect(detail.events.filter((e) => e.type === 'asleep').at(-1)?.message).toMatch(/^scaled to zero: no request for \d+(\.\d)? s/);
    expect(detail.status.autoscaler).toMatchObject({ action: 'down', to: 0 });

    // The first request wakes it and is answered.
    const woken = await fetch(`${fleet.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${fleet.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-auto', messages: [{ role: 'user', content: 'wake' }], max_tokens: 2 }),
    });
    expect(woken.status, await woken.clone().text()).toBe(200);
    expect((await status()).status).toMatchObject({ asleep: false, desired: 1 });
  }, 240_000);

  it('stops cleanly on Ctrl-C, and every runtime the agents launched is gone', async () => {
    const runtimes = await runtimeFiles();
    expect(runtimes.length).toBeGreaterThan(0);
    await fleet.stop();
    // npm itself may die of the SIGINT; the launcher it ran must finish its orderly stop.
    expect(fleet.output()).toContain('stopped cleanly');
    for (const { pid } of runtimes) expect(pidAlive(pid)).toBe(false);
  }, 60_000);

  /** The runtimes the nodes record as theirs now (each node's state directory). */
  async function runtimeFiles(): Promise<Array<{ pid: number; uid: number }>> {
    const found: Array<{ pid: number; uid: number }> = [];
    for (const node of await readdir(join(fleet.dataDir, 'nodes'))) {
      const dir = join(fleet.dataDir, 'nodes', node, 'runtimes');
      for (const file of (await readdir(dir)).filter((f) => f.endsWith('.json'))) found.push(JSON.parse(await readFile(join(dir, file), 'utf8')));
    }
    return found;
  }
});

/** The peer channel's variables apply under `npm start` as they do on the production entry (docs/operations.md). */
describePg('npm start on DATABASE_URL', () => {
  it('listens for peers where LUNANEXA_PEER_HOST/PORT say and advertises LUNANEXA_PEER_URL', async () => {
    const db = await createTestDatabase();
    const peerPort = await freePort();
    const peerUrl = `http://localhost:${peerPort}`;
    const env = {
      LUNANEXA_SIM_NODES: '0',
      DATABASE_URL: db.url,
      LUNANEXA_PEER_HOST: '127.0.0.1',
      LUNANEXA_PEER_PORT: String(peerPort),
      LUNANEXA_PEER_URL: peerUrl,
    };
    const plane = await startNpmStart(env, /LunaNexa control plane/);
    try {
      expect(plane.output()).toContain(peerUrl);
      // The listener is on the port asked for.
      await new Promise<void>((resolve, reject) => {
        const socket = connect(peerPort, '127.0.0.1', () => {
          socket.destroy();
          resolve();
        });
        socket.once('error', reject);
      });
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ peer_url: string | null }>('select peer_url from instances');
        expect(rows.map((r) => r.peer_url)).toEqual([peerUrl]);
      } finally {
        await client.end();
      }
    } finally {
      await plane.stop();
      await db.drop();
    }
  }, 120_000);
});
