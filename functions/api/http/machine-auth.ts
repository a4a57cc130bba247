import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../kernel/errors.js';
import { verifyMachineRequest } from '../../services/machine-auth.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { bearer } from './api-auth.js';

/**
 * Authenticates an agent request by its per-request machine JWT (docs/design.md section 4). Reads the body once
 * to check its digest and keeps it for the handler as `rawBody`.
 */
export const machineAuth = machineAuthFor('buffered');

/**
 * For streamed uploads (frames), whose digest cannot be known before the first byte is sent: the JWT must
 * carry the digest of the empty body and binds method and path (the invocation id) only; the body is left
 * unread for the handler to stream.
 */
export const machineAuthStreamed = machineAuthFor('streamed');

function machineAuthFor(mode: 'buffered' | 'streamed') {
  return createMiddleware<AppEnv>(async (c, next) => {
    const ports = c.get('ports');
    const body = mode === 'buffered' ? await c.req.text() : '';
    try {
      const identity = await ports.identity();
      const machine = await verifyMachineRequest({
        ctx: serviceCtx(ports, 'agent'),
        input: {
          token: bearer(c.req.header('authorization')),
          method: c.req.method,
          path: c.req.path,
          body,
          clusterId: identity.clusterId,
          cache: mode === 'streamed' ? ports.caches.machineAuth : undefined,
        },
      });
      c.set('machine', machine);
    } catch (error) {
      if (error instanceof ApiError) {
        const reason = (error.details as { reason?: string } | undefined)?.reason ?? error.code;
        ports.metrics.agentAuthFailures.inc({ reason });
      }
      throw error;
    }
    c.set('rawBody', body);
    await next();
  });
}
