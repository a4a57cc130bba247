import type { IncomingMessage, ServerResponse } from 'node:http';

export const MAX_BODY_BYTES = 4 * 1024 * 1024;
// Past this the client is not sending a request any more, just occupying the socket.
const MAX_DISCARD_BYTES = 64 * 1024 * 1024;

export function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

export function sendJson(res: ServerResponse, status: number, body: string, headers?: Record<string, string>): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...headers,
  });
  res.end(body);
}

export type BodyResult = { kind: 'ok'; text: string } | { kind: 'too-large' } | { kind: 'aborted' };

export function readBody(req: IncomingMessage): Promise<BodyResult> {
  return new Promise((resolve) => {
    const declared = Number(req.headers['content-length']);
    let tooLarge = Number.isFinite(declared) && declared > MAX_BODY_BYTES;
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) tooLarge = true;
      if (tooLarge) {
        chunks.length = 0;
        // Draining lets the client finish uploading and then read the 413 instead of a reset.
        if (size > MAX_DISCARD_BYTES) req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      resolve(tooLarge ? { kind: 'too-large' } : { kind: 'ok', text: Buffer.concat(chunks, size).toString('utf8') });
    });
    req.on('close', () => resolve({ kind: 'aborted' }));
  });
}
