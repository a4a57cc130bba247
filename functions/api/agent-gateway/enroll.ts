import type { Hono } from 'hono';
import { ApiError, parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { EnrollRequest, type EnrollResponse } from '../../../shared/contracts/enrollment.js';
import { enrollMachine } from '../../services/enrollment.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';

/** POST /agent/v1/enroll: trades a single-use enrollment token and a public key for a machine identity. */
export function registerEnroll(app: Hono<AppEnv>) {
  app.post('/enroll', async (c) => {
    const ports = c.get('ports');
    const input = parseOr400(EnrollRequest, parseJsonOr400(await c.req.text()));
    const ctx = serviceCtx(ports, 'agent');
    let enrolled;
    try {
      enrolled = await enrollMachine({ ctx, input });
      ports.metrics.enrollments.inc({ result: 'ok' });
    } catch (error) {
      if (error instanceof ApiError) ports.metrics.enrollments.inc({ result: error.code });
      throw error;
    }
    const identity = await ports.identity();
    const body: EnrollResponse = {
      machineId: enrolled.machineId,
      workspaceId: enrolled.workspaceId,
      clusterId: identity.clusterId,
      credentialId: enrolled.credentialId,
      credentialExpiresAt: enrolled.credentialExpiresAt.toISOString(),
      jwks: identity.jwks,
      heartbeatIntervalMs: ports.config.heartbeatIntervalMs,
    };
    return c.json(body, 201);
  });
  app.get('/jwks', async (c) => c.json((await c.get('ports').identity()).jwks));
}
