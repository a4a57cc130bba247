import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { connect } from 'node:net';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { freePort } from '../../agent/runtimes/process.js';
import { waitForExit } from '../../functions/hosts/dev/fleet.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { waitFor } from '../helpers/plane.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';

/** The public contract of docs/design.md section 10: `npm start` on a fresh data dir, then Ctrl-C. */
describe('npm start', () => {
  let dataDir: string;
  afterAll(async () => {
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('serves four ready simulated nodes with sim-chat (answering the openai client), an admin token file, and stops cleanly on Ctrl-C', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'lnx-start-'));
    const port = await freePort();
    // Its own process group, so that a signal to the group is what Ctrl-C in a terminal does.
    const child = spawn('npm', ['start'], {
      cwd: process.cwd(),
      env: { ...process.env, LUNANEXA_DATA_DIR: dataDir, LUNANEXA_PORT: String(port), LUNANEXA_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    child.stdout!.on('data', (chunk) => (output += chunk));
    child.stderr!.on('data', (chunk) => (output += chunk));
    try {
      const tokenPath = join(dataDir, 'admin.token');
      const token = await waitFor(async () => (await readFile(tokenPath, 'utf8')).trim(), { timeoutMs: 60_000, what: 'admin.token' });
      expect((await stat(tokenPath)).mode & 0o777).toBe(0o600);
      // The moment the launcher says the demo is ready, the first request succeeds.
      await waitFor(async () => /simulated nodes ready/.test(output), { timeoutMs: 90_000, intervalMs: 20, what: 'the ready line' });
      const first = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'first' }], max_tokens: 2 }),
      });
      expect(first.status, await first.clone().text()).toBe(200);
      const machines = await waitFor(
        async () => {
          const response = await fetch(`http://127.0.0.1:${port}/api/v1/machines`, { headers: { authorization: `Bearer ${token}` } });
          const data = ((await response.json()) as { data: MachineView[] }).data;
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
        const uids: number[] = [];
        for (const node of machines.map((m) => m.name)) {
          const runtimes = join(dataDir, 'nodes', node, 'runtimes');
          for (const file of (await readdir(runtimes)).filter((f) => f.endsWith('.json'))) {
            const { pid, uid } = JSON.parse(await readFile(join(runtimes, file), 'utf8')) as { pid: number; uid: number };
            expect(/^Uid:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))![1]).toBe(String(uid));
            uids.push(uid);
          }
        }
        expect(new Set(uids).size).toBe(4);
        expect(uids.every((uid) => uid >= 2_013_265_920)).toBe(true);
      }
      expect(output).toContain(`http://127.0.0.1:${port}`);
      expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);

      // The official client against the real `npm start` fleet: the demo model answers through the relay.
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: token, maxRetries: 0 });
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
    } finally {
      process.kill(-child.pid!, 'SIGINT');
      await waitForExit(child, 30_000);
    }
    // npm itself may die of the SIGINT; the launcher it ran must finish its orderly stop.
    await waitFor(async () => output.includes('stopped cleanly'), { timeoutMs: 30_000, what: 'orderly stop' });
    // Every runtime the agents launched is gone.
    for (const node of await readdir(join(dataDir, 'nodes'))) {
      const runtimes = join(dataDir, 'nodes', node, 'runtimes');
      for (const file of (await readdir(runtimes)).filter((f) => f.endsWith('.json'))) {
        const { pid } = JSON.parse(await readFile(join(runtimes, file), 'utf8')) as { pid: number };
        expect(pidAlive(pid)).toBe(false);
      }
    }
  }, 180_000);
});

/** The peer channel's variables apply under `npm start` as they do on the production entry (docs/operations.md). */
describePg('npm start on DATABASE_URL', () => {
  it('listens for peers where LUNANEXA_PEER_HOST/PORT say and advertises LUNANEXA_PEER_URL', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'lnx-start-peer-'));
    const db = await createTestDatabase();
    const [port, peerPort] = [await freePort(), await freePort()];
    const peerUrl = `http://localhost:${peerPort}`;
    const child = spawn('npm', ['start'], {
      cwd: process.cwd(),
      env: {
        ...process.env,
        LUNANEXA_DATA_DIR: dataDir,
        LUNANEXA_PORT: String(port),
        LUNANEXA_LOG_LEVEL: 'warn',
        LUNANEXA_SIM_NODES: '0',
        DATABASE_URL: db.url,
        LUNANEXA_PEER_HOST: '127.0.0.1',
        LUNANEXA_PEER_PORT: String(peerPort),
        LUNANEXA_PEER_URL: peerUrl,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    child.stdout!.on('data', (chunk) => (output += chunk));
    child.stderr!.on('data', (chunk) => (output += chunk));
    try {
      await waitFor(async () => output.includes('LunaNexa control plane'), { timeoutMs: 60_000, what: 'the start banner' });
      expect(output).toContain(peerUrl);
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
      process.kill(-child.pid!, 'SIGINT');
      await waitForExit(child, 30_000);
      await waitFor(async () => output.includes('stopped cleanly'), { timeoutMs: 30_000, what: 'orderly stop' }).catch(() => {});
      await db.drop();
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
