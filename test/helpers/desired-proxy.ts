import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { decodeJwt, SignJWT } from 'jose';
import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import type { Heartbeat } from '../../shared/contracts/heartbeat.js';
import type { RunningControlPlane } from '../../functions/hosts/node.js';

/**
 * An HTTP proxy between an agent and a real control plane that adds run workers to the desired state, for agent
 * tests while the plane signs none: every `desired` event of the agent's stream is re-signed with the plane's own
 * key (same claims, plus `workers`), and `setWorkers` sends a new one at once. It also keeps the heartbeats the agent
 * sends and can ask it for a worker's logs. Everything else passes through unchanged (agent requests are signed
 * over method, path and body, never the host).
 */
export interface DesiredProxy {
  url: string;
  setWorkers(workers: WorkerAssignment[]): Promise<void>;
  /** The last heartbeat the agent sent, or null. */
  lastHeartbeat(): Heartbeat | null;
  /** Sends a `logs` event for `id` down the stream and resolves with the lines the agent uploads. */
  logs(id: string, lines: number): Promise<string[]>;
  close(): Promise<void>;
}

async function body(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function startDesiredProxy(plane: Pick<RunningControlPlane, 'port' | 'ports'>): Promise<DesiredProxy> {
  let workers: WorkerAssignment[] = [];
  let heartbeat: Heartbeat | null = null;
  /** Open streams: each with the claims of the plane's last desired state on it and a writer in stream order. */
  const streams = new Set<{ claims: Record<string, unknown> | null; send: (text: () => Promise<string>) => Promise<void> }>();
  const logWaiters = new Map<string, (lines: string[]) => void>();

  async function resign(claims: Record<string, unknown>): Promise<string> {
    const identity = await plane.ports.identity();
    const jws = await new SignJWT({ ...claims, workers })
      .setProtectedHeader({ alg: 'EdDSA', kid: identity.signingKey.kid, typ: 'lunanexa-desired+jwt' })
      .sign(identity.signingKey.privateKey);
    return `event: desired\ndata: ${JSON.stringify({ jws })}\n\n`;
  }

  const server: Server = createServer((req, res) => {
    void (async () => {
      const payload = await body(req);
      const path = req.url ?? '/';
      if (req.method === 'POST' && path === '/agent/v1/heartbeat') heartbeat = JSON.parse(payload.toString('utf8')) as Heartbeat;
      const logsUpload = /^\/agent\/v1\/runtimes\/[^/]+\/logs$/.test(path) && req.method === 'POST';
      if (logsUpload) {
        const upload = JSON.parse(payload.toString('utf8')) as { requestId: string; lines: string[] };
        const waiter = logWaiters.get(upload.requestId);
        if (waiter) {
          logWaiters.delete(upload.requestId);
          waiter(upload.lines);
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ accepted: true }));
          return;
        }
      }
      const upstream = request({ host: '127.0.0.1', port: plane.port, method: req.method, path, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        if (path !== '/agent/v1/stream' || answer.statusCode !== 200) return void answer.pipe(res);
        let queue = Promise.resolve();
        const stream = {
          claims: null as Record<string, unknown> | null,
          send: (text: () => Promise<string>) => (queue = queue.then(async () => void res.write(await text()))),
        };
        streams.add(stream);
        let buffered = '';
        answer.setEncoding('utf8');
        answer.on('data', (chunk: string) => {
          buffered += chunk;
          let end: number;
          while ((end = buffered.indexOf('\n\n')) !== -1) {
            const block = buffered.slice(0, end + 2);
            buffered = buffered.slice(end + 2);
            const data = /^event: desired\n(?:id: .*\n)?data: (.*)\n\n$/.exec(block)?.[1];
            if (data === undefined) {
              void stream.send(async () => block);
              continue;
            }
            stream.claims = decodeJwt((JSON.parse(data) as { jws: string }).jws) as Record<string, unknown>;
            const claims = stream.claims;
            void stream.send(() => resign(claims));
          }
        });
        answer.on('end', () => {
          streams.delete(stream);
          void queue.then(() => res.end());
        });
        res.on('close', () => {
          streams.delete(stream);
          answer.destroy();
        });
      });
      upstream.on('error', () => res.destroy());
      upstream.end(payload);
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    url: `http://127.0.0.1:${port}`,
    async setWorkers(next) {
      workers = next;
      await Promise.all([...streams].map((s) => (s.claims ? s.send(() => resign(s.claims!)) : Promise.resolve())));
    },
    lastHeartbeat: () => heartbeat,
    logs(id, lines) {
      const requestId = `req-${Math.random().toString(36).slice(2)}`;
      const answer = new Promise<string[]>((resolve) => logWaiters.set(requestId, resolve));
      for (const s of streams) void s.send(async () => `event: logs\ndata: ${JSON.stringify({ requestId, assignmentId: id, lines })}\n\n`);
      return answer;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
