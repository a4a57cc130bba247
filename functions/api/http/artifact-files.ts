import { Hono } from 'hono';
import type { AppEnv } from '../../dataplane/ports.js';
import { openSignedArtifactFile } from '../../services/artifact-files.js';
import { byteRange } from './byte-range.js';

/**
 * `GET|HEAD /artifacts/v1/<workspace>/<model>/<version>/<path>?exp=&sig=`: the local artifact store's files, at
 * the URLs a signed desired state hands agents (docs/artifacts.md). The signature is the authorisation, so no
 * token is asked for; outside `/api/v1` because it is not a management call, and neither audited (an agent reads
 * thousands of files) nor logged with its query (the signature is a bearer credential until it expires).
 * `Range` is honoured so that an agent resumes an interrupted download; files are streamed, never held whole.
 */
export function artifactFiles(): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  // Hono answers HEAD with the GET route, dropping its body: the file is then closed here rather than left open.
  app.get('/*', async (c) => {
    const { file } = await openSignedArtifactFile({
      owner: c.get('ports'),
      urlPath: new URL(c.req.url).pathname,
      exp: c.req.query('exp'),
      sig: c.req.query('sig'),
    });
    const range = byteRange(c.req.header('range'), file.size);
    if (range.kind === 'unsatisfiable') {
      await file.close();
      c.header('Content-Range', `bytes */${file.size}`);
      return c.json(
        { error: { code: 'range_not_satisfiable', message: `the range is past the file's ${file.size} bytes`, requestId: c.get('requestId') } },
        416,
      );
    }
    const { start, end } = range.kind === 'part' ? range : { start: 0, end: file.size - 1 };
    const headers: Record<string, string> = {
      'Content-Type': 'application/octet-stream',
      'Content-Length': String(end - start + 1),
      'Accept-Ranges': 'bytes',
      // A bearer URL: no shared cache may keep what it fetched.
      'Cache-Control': 'private, no-store',
    };
    if (range.kind === 'part') headers['Content-Range'] = `bytes ${start}-${end}/${file.size}`;
    const status = range.kind === 'part' ? 206 : 200;
    if (c.req.method === 'HEAD' || end < start) {
      await file.close();
      return c.body(null, status, headers);
    }
    return c.body(file.stream(start, end), status, headers);
  });
  return app;
}
