import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import pg from 'pg';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';

export interface NeonWsProxy {
  /** `host:port/path` for the Worker's NEON_WS_PROXY binding. */
  address: string;
  /** The SQL-over-HTTP stand-in's URL, for the Worker's NEON_SQL_ENDPOINT binding. */
  sqlEndpoint: string;
  /** Statements (or batches) the SQL-over-HTTP stand-in has run since start. */
  sqlRequests(): number;
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

type SqlQuery = { query: string; params?: unknown[] };

/** One statement as Neon's SQL-over-HTTP endpoint answers it: text values, rows as arrays, the fields' type ids. */
async function runStatement(client: pg.Pool | pg.PoolClient, q: SqlQuery) {
  const result = await client.query({ text: q.query, values: q.params ?? [], rowMode: 'array', types: { getTypeParser: () => (value: string) => value } });
  return {
    command: result.command,
    rowCount: result.rowCount,
    rows: result.rows,
    fields: result.fields.map((f) => ({
      name: f.name,
      dataTypeID: f.dataTypeID,
      tableID: f.tableID,
      columnID: f.columnID,
      dataTypeSize: f.dataTypeSize,
      dataTypeModifier: f.dataTypeModifier,
      format: f.format,
    })),
    rowAsArray: true,
  };
}

/**
 * A stand-in for Neon's SQL-over-HTTP endpoint (`POST /sql`, the connection string in `Neon-Connection-String`):
 * one statement, or a batch run in one transaction. Only loopback databases, like the WebSocket proxy.
 */
async function answerSql(request: IncomingMessage, response: ServerResponse, pools: Map<string, pg.Pool>): Promise<void> {
  const reply = (status: number, body: unknown) => {
    response.writeHead(status, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  };
  const connectionString = String(request.headers['neon-connection-string'] ?? '');
  const url = URL.canParse(connectionString) ? new URL(connectionString) : null;
  if (!url || !loopbackTarget(`${url.hostname}:${url.port || '5432'}`)) return reply(403, { message: 'only loopback databases are allowed' });
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as SqlQuery | { queries: SqlQuery[] };
  let pool = pools.get(connectionString);
  if (!pool) pools.set(connectionString, (pool = new pg.Pool({ connectionString, max: 4 })));
  try {
    if (!('queries' in body)) return reply(200, await runStatement(pool, body));
    const client = await pool.connect();
    try {
      await client.query('begin');
      const results = [];
      for (const q of body.queries) results.push(await runStatement(client, q));
      await client.query('commit');
      reply(200, { results });
    } catch (error) {
      await client.query('rollback').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  } catch (error) {
    const e = error as pg.DatabaseError;
    reply(400, { message: e.message, code: e.code, detail: e.detail, constraint: e.constraint, table: e.table, column: e.column });
  }
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
  let sqlRequests = 0;
  const pools = new Map<string, pg.Pool>();
  const server = createServer((request, response) => {
    if (request.method !== 'POST' || request.url !== '/sql') {
      response.writeHead(404).end();
      return;
    }
    sqlRequests += 1;
    answerSql(request, response, pools).catch(() => response.destroy());
  });
  const wss = new WebSocketServer({
    server,
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
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as { port: number };
  return {
    address: `127.0.0.1:${port}/v2`,
    sqlEndpoint: `http://127.0.0.1:${port}/sql`,
    sqlRequests: () => sqlRequests,
    refused,
    openConnections: () => sockets.size,
    acceptedConnections: () => accepted,
    async close() {
      for (const ws of wss.clients) ws.terminate();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all([...pools.values()].map((pool) => pool.end()));
    },
  };
}
