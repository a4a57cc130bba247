import { and, eq } from 'drizzle-orm';
import { swarms } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import type { ServiceCtx } from './service-context.js';

export type SwarmRow = typeof swarms.$inferSelect;

/**
 * A workspace's swarm by name, or 404: another workspace's alike. `lock` locks its row (`share`: a job submitted to
 * it, which its `down`, holding it for update, waits for or makes fail).
 */
export async function findSwarm(ctx: ServiceCtx, input: { workspaceId: string; name: string; lock?: 'update' | 'share' }): Promise<SwarmRow> {
  const query = ctx.db
    .select()
    .from(swarms)
    .where(and(eq(swarms.workspaceId, input.workspaceId), eq(swarms.name, input.name)));
  const [row] = input.lock ? await query.for(input.lock) : await query;
  if (!row) throw new ApiError('not_found', `swarm ${input.name} not found`);
  return row;
}

/**
 * The model a swarm's clients and jobs name: its deployment's name, which is what `/v1` routes a request's `model`
 * by (the deployment's own `model` is what its runtime loads, which several deployments may share).
 */
export function swarmModel(swarm: SwarmRow): string {
  return swarm.deploymentName;
}
