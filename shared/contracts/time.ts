import { z } from 'zod';

/**
 * `GET /agent/v1/time`: the control plane's clock (the one that judges machine tokens), as epoch ms. Agents
 * measure their clock's offset from it and sign with the corrected time.
 */
export const ServerTime = z.object({ now: z.number().int().nonnegative() });
export type ServerTime = z.infer<typeof ServerTime>;
