import { Hono } from 'hono';
import { requestId } from 'hono/request-id';
import type { AppEnv, Ports } from '../dataplane/ports.js';
import { handleError, notFound } from './http/errors.js';
import { managementApi } from './management/index.js';
import { agentGateway } from './agent-gateway/index.js';
import { inferenceApi } from './v1/index.js';
import { handleOpenAIError, OpenAIError } from './v1/errors.js';
import { storeReadiness } from '../services/store-readiness.js';
import { securityHeaders } from './http/security-headers.js';
import { urlGuard } from './http/url-guard.js';
import { registerMetrics } from './http/metrics-route.js';
import { consoleApp } from './console/index.js';
import { artifactFiles } from './http/artifact-files.js';

/** Composes every surface over the given ports. Does no I/O at import time or here. */
export function newApp(ports: Ports): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.use('*', requestId({ headerName: 'X-Request-Id', generator: () => crypto.randomUUID() }));
  app.use('*', async (c, next) => {
    c.set('ports', ports);
    await next();
  });
  // First around every other handler, so that errors and 404s carry the headers too.
  app.use('*', securityHeaders);
  app.use('*', urlGuard);
  app.onError((error, c) => (c.req.path.startsWith('/v1/') ? handleOpenAIError(error, c) : handleError(error, c)));
  app.notFound((c) =>
    c.req.path.startsWith('/v1/')
      ? handleOpenAIError(new OpenAIError(404, 'invalid_request_error', 'unknown_url', `Unknown request URL: ${c.req.method} ${c.req.path}`), c)
      : notFound(c),
  );

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const { reachable, migrated, auditOwnedByPlane } = await storeReadiness(ports.store.db);
    const ready = reachable && migrated === true;
    return c.json(
      { status: ready ? 'ready' : reachable ? 'not_ready' : 'store_unreachable', store: ports.store.kind, reachable, migrated, auditOwnedByPlane },
      ready ? 200 : 503,
    );
  });
  registerMetrics(app, ports);
  app.route('/api/v1', managementApi({ maxBodyBytes: ports.config.apiMaxBodyBytes, manifestMaxBodyBytes: ports.config.manifestMaxBodyBytes }));
  app.route('/agent/v1', agentGateway(ports.config.agentMaxBodyBytes, ports.config.framesMaxBytes));
  app.route('/v1', inferenceApi(ports.config.inferenceMaxBodyBytes));
  // The local artifact store's signed file URLs (docs/artifacts.md): the signature is their authorisation.
  app.route('/artifacts/v1', artifactFiles());
  // The web console: `/` and `/console/...` only (functions/api/console/index.ts); last, so it shadows no other surface.
  app.route('/', consoleApp());
  return app;
}
