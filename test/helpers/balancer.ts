import { connect, createServer, type Socket } from 'node:net';

export interface Balancer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * A TCP load balancer in front of control-plane instances, as in production: `failover` sends every connection
 * to the first backend that accepts it, `round-robin` starts each connection one backend further. A backend
 * that refuses (a dead instance) is skipped, so clients and agents reach a survivor by reconnecting.
 */
export async function startBalancer(backends: readonly number[], mode: 'failover' | 'round-robin'): Promise<Balancer> {
  let next = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.pause();
    const start = mode === 'round-robin' ? next++ % backends.length : 0;
    const tryBackend = (tried: number) => {
      if (tried === backends.length) {
        client.destroy();
        return;
      }
      const upstream = connect(backends[(start + tried) % backends.length]!, '127.0.0.1');
      upstream.once('error', () => tryBackend(tried + 1));
      upstream.once('connect', () => {
        upstream.removeAllListeners('error');
        sockets.add(upstream);
        upstream.on('close', () => sockets.delete(upstream));
        upstream.on('error', () => client.destroy());
        client.on('error', () => upstream.destroy());
        upstream.on('close', () => client.destroy());
        client.on('close', () => upstream.destroy());
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      });
    };
    tryBackend(0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
