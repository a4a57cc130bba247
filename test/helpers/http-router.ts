import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HttpRouter {
  url: string;
  /** Requests forwarded so far, by backend port and path. */
  seen: Array<{ port: number; method: string; path: string }>;
  close(): Promise<void>;
}

/**
 * A layer-7 reverse proxy in front of control-plane instances, as a load balancer routing by path would be: each
 * request goes to the backend port `route` picks, streamed both ways, or with its body buffered whole before it is
 * forwarded where `buffer` says so (the kind of proxy that defeats a streamed upload).
 */
export async function startHttpRouter(opts: { route: (method: string, path: string) => number; buffer?: (path: string) => boolean }): Promise<HttpRouter> {
  const seen: HttpRouter['seen'] = [];
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    const port = opts.route(req.method ?? 'GET', path);
    seen.push({ port, method: req.method ?? 'GET', path });
    const forward = (body: Buffer | IncomingMessage) => {
      const headers = { ...req.headers };
      if (Buffer.isBuffer(body)) {
        delete headers['transfer-encoding'];
        headers['content-length'] = String(body.length);
      }
      const upstream = request({ host: '127.0.0.1', port, method: req.method, path, headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      res.on('close', () => upstream.destroy());
      if (Buffer.isBuffer(body)) upstream.end(body);
      else body.pipe(upstream);
    };
    if (!opts.buffer?.(path)) return forward(req);
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => forward(Buffer.concat(parts)));
  });
  server.requestTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
