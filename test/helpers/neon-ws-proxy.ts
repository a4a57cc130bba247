import { connect, type Socket } from 'node:net';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';

export interface NeonWsProxy {
  /** `host:port/path` for the Worker's NEON_WS_PROXY binding. */
  address: string;
  /** TCP targets the proxy refused (not loopback), so a test can see the guard act. */
  refused: string[];
  /** TCP connections to PostgreSQL open right now; the Worker must not leave any behind after a request. */
  openConnections(): number;
  /** TCP connections opened since start. */
  acceptedConnections(): number;
  close(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

/** Splits `host:port` (IPv6 in brackets) and accepts only loopback targets with a valid port. */
function loopbackTarget(address: string | null): { host: string; port: number } | undefined {
  if (!address) return undefined;
  const match = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(address);
  if (!match) return undefined;
  const host = match[1]!;
  const port = Number(match[2]);
  if (!LOOPBACK.has(host) || port < 1 || port > 65535) return undefined;
  return { host: host.replace(/^\[|\]$/g, ''), port };
}

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function pipe(ws: WebSocket, tcp: Socket): void {
  // Bytes the driver sends before the TCP connection is up must not be lost: the Postgres startup message is one.
  const early: Buffer[] = [];
  let connected = false;
  tcp.on('connect', () => {
    connected = true;
    for (const chunk of early.splice(0)) tcp.write(chunk);
  });
  ws.on('message', (data) => {
    const chunk = toBuffer(data);
    if (connected) tcp.write(chunk);
    else early.push(chunk);
  });
  tcp.on('data', (chunk) => {
    if (ws.readyState === ws.OPEN) ws.send(chunk, { binary: true });
  });
  tcp.on('close', () => ws.close());
  tcp.on('error', () => ws.terminate());
  ws.on('close', () => tcp.destroy());
  ws.on('error', () => tcp.destroy());
}

/**
 * A stand-in for Neon's WebSocket proxy in front of the test PostgreSQL: WebSocket connections on 127.0.0.1 at
 * `/v2?address=host:port` are piped, binary frame for chunk, to that TCP address. Only loopback targets are
 * allowed, so the helper cannot be turned into an open relay while a suite runs.
 */
export async function startNeonWsProxy(): Promise<NeonWsProxy> {
  const refused: string[] = [];
  const sockets = new Set<Socket>();
  let accepted = 0;
  const wss = new WebSocketServer({
    host: '127.0.0.1',
    port: 0,
    path: '/v2',
    verifyClient: ({ req }, done) => {
      const address = new URL(req.url ?? '/', 'http://proxy').searchParams.get('address');
      if (loopbackTarget(address)) return done(true);
      refused.push(address ?? '(none)');
      done(false, 403, 'only loopback targets are allowed');
    },
  });
  wss.on('connection', (ws, req) => {
    const target = loopbackTarget(new URL(req.url ?? '/', 'http://proxy').searchParams.get('address'))!;
    const tcp = connect({ host: target.host, port: target.port });
    tcp.setNoDelay(true);
    sockets.add(tcp);
    accepted += 1;
    tcp.on('close', () => sockets.delete(tcp));
    pipe(ws, tcp);
  });
  await new Promise<void>((resolve, reject) => {
    wss.once('listening', resolve);
    wss.once('error', reject);
  });
  const { port } = wss.address() as { port: number };
  return {
    address: `127.0.0.1:${port}/v2`,
    refused,
    openConnections: () => sockets.size,
    acceptedConnections: () => accepted,
    async close() {
      for (const ws of wss.clients) ws.terminate();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}
