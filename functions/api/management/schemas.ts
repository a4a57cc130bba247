import { z } from '@hono/zod-openapi';
import { ErrorEnvelope } from '../../../shared/contracts/common.js';

/** The error responses every management route declares. */
export function errorResponses(...statuses: Array<400 | 401 | 403 | 404 | 409 | 413>) {
  const descriptions = { 400: 'Invalid input', 401: 'Missing or invalid token', 403: 'Role too low', 404: 'Not found', 409: 'Conflict', 413: 'Body too large' };
  return Object.fromEntries(
    statuses.map((status) => [status, { description: descriptions[status], content: { 'application/json': { schema: ErrorEnvelope } } }]),
  );
}

export const MachineIdParam = z.object({ id: z.string().min(1).max(64) });
