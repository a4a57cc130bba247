import { connect, type Socket } from 'node:net';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { eq } from 'drizzle-orm';
import { seedDemoDeployment, startSimNode, stopSimNodes } from '../../functions/hosts/dev/fleet.js';
import { ControlPlaneConfig } from '../../functions/kernel/config.js';
import { workloads } from '../../functions/store/schema/index.js';
import { startTestPlane, waitFor } from '../helpers/plane.js';
import { simStats } from '../chaos/nodes.js';

/**
 * `npm run bench:slow-clients`: clients that ask for a 256k-token streamed answer and never read a byte, against a
 * control plane with the default relay window and bounds (docs/relay.md, "Memory"), the stall limit shortened to
 * `BENCH_STALL_MS` so the run ends sooner. Prints the process's resident memory before, at its peak while they
 * are connected, and after they were cut, beside the bound the relay enforces, and how far the runtime generated
 * while nobody read. The plane runs in this process (the node and its runtime in their own); the clients' sockets
 * are paused, so what they leave unread stays in the kernel's buffers, not in this process.
 */
const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 20);
const STALL_MS = Number(process.env.BENCH_STALL_MS ?? 10_000);
const TOKENS = 262_144;

const rssMiB = () => {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0);
  return kb / 1024;
};
const mib = (bytes: number) => bytes / 1024 / 1024;

const plane = await startTestPlane({ config: { relayClientStallMs: STALL_MS } });
await seedDemoDeployment(plane, 1, { tokensPerSecond: 0 });
const node = await startSimNode(plane, 'bench-slow-clients', plane.dataDir);
const sockets: Socket[] = [];
try {
  await waitFor(async () => plane.ports.dataPlane.routing.resolve(plane.workspaceId, 'sim-chat')?.replicas.length === 1, {
    timeoutMs: 60_000,
    what: 'sim-chat routable',
  });
  const port = Number(new URL(plane.url).port);
  const body = JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'everything' }], max_tokens: TOKENS, stream: true });
  global.gc?.();
  const generatedBefore = (await simStats(node)).tokensStreamed;
  let generated = 0;
  const before = rssMiB();
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMiB())), 50);
  const started = performance.now();
  for (let i = 0; i < CLIENTS; i++) {
    const socket = connect(port, '127.0.0.1');
    socket.pause();
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${plane.adminToken}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    sockets.push(socket);
  }
  // Sampled just before the first client can be cut: how far generation ran while nobody read.
  await new Promise((resolve) => setTimeout(resolve, STALL_MS - 1_000));
  generated = (await simStats(node)).tokensStreamed - generatedBefore;
  const cut = async () => (await plane.ports.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.errorCode, 'client_too_slow'))).length;
  await waitFor(async () => (await cut()) >= CLIENTS, { timeoutMs: 300_000, what: `${CLIENTS} clients cut` });
  const cutAfterS = (performance.now() - started) / 1000;
  await waitFor(async () => plane.ports.dataPlane.budget.usage().held === 0, { timeoutMs: 30_000, what: 'nothing held' });
  clearInterval(sampler);
  const after = rssMiB();
  const limits = ControlPlaneConfig.parse({});
  const bound = Math.min(CLIENTS * limits.relayWindowBytes, limits.relayBuffersMaxBytes);
  const { peak: heldPeak } = plane.ports.dataPlane.budget.usage();
  const [load1] = loadavg();
  console.log(`\n${CLIENTS} clients, ${TOKENS} tokens each (about ${Math.round((TOKENS * 110) / 1024 / 1024)} MiB of SSE per answer), none reading\n`);
  console.log('| measure | value |');
  console.log('|---|---|');
  console.log(`| RSS before the clients | ${before.toFixed(0)} MiB |`);
  console.log(`| RSS at its peak while they were connected | ${peak.toFixed(0)} MiB (+${(peak - before).toFixed(0)} MiB) |`);
  console.log(`| RSS after they were cut | ${after.toFixed(0)} MiB |`);
  console.log(`| answer bytes the relay held at once, at most | ${mib(heldPeak).toFixed(1)} MiB |`);
  console.log(
    `| the relay's bound for ${CLIENTS} clients (min of ${CLIENTS} x a ${mib(limits.relayWindowBytes)} MiB window, ${mib(limits.relayBuffersMaxBytes)} MiB) | ${mib(bound).toFixed(0)} MiB |`,
  );
  console.log(
    `| tokens the runtime generated while nobody read (of ${CLIENTS} x ${TOKENS}) | ${generated} (${((100 * generated) / (CLIENTS * TOKENS)).toFixed(1)} %) |`,
  );
  console.log(`| all ${CLIENTS} cut with client_too_slow after (stall limit ${STALL_MS / 1000} s) | ${cutAfterS.toFixed(1)} s |`);
  console.log(`| load average (1 min) | ${load1?.toFixed(2)} |`);
  if (heldPeak > bound) throw new Error(`the relay held ${heldPeak} bytes, past its bound of ${bound}`);
} finally {
  for (const socket of sockets) socket.destroy();
  await stopSimNodes([node]);
  await plane.stop();
}
process.exit(0);
