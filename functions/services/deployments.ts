import { and, eq, isNull, sql } from 'drizzle-orm';
import { deployments } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { ArtifactPin, RestartPolicy, RuntimeSpec } from '../../shared/contracts/desired.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';

export interface DeploymentInput {
  workspaceId: string;
  name: string;
  model: string;
  runtime: RuntimeSpec;
  artifact: ArtifactPin | null;
  restartPolicy: RestartPolicy;
  replicas: number;
  selector: Record<string, string>;
  gpus: number;
  memoryMiB: number;
}

/**
 * Creates the deployment, or updates it (bumping its generation) when its spec differs; a no-op otherwise.
 * The registry and deployments API will own this; until then the simulator seeds through it.
 */
export async function applyDeployment({ ctx, input }: { ctx: ServiceCtx; input: DeploymentInput }): Promise<{ id: string; generation: number; changed: boolean }> {
  return await withTransaction(ctx, async (tx) => {
    const [existing] = await tx.db
      .select()
      .from(deployments)
      .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.name, input.name), isNull(deployments.deletedAt)))
      .for('update');
    const spec = {
      model: input.model,
      runtime: input.runtime,
      artifact: input.artifact,
      restartPolicy: input.restartPolicy,
      replicas: input.replicas,
      selector: input.selector,
      gpus: input.gpus,
      memoryMiB: input.memoryMiB,
    };
    if (!existing) {
      const id = newId('deployment');
      await tx.db.insert(deployments).values({ id, workspaceId: input.workspaceId, name: input.name, ...spec });
      await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.create', target: id, details: { name: input.name, replicas: input.replicas } });
      return { id, generation: 1, changed: true };
    }
    const before = JSON.stringify({
      model: existing.model,
      runtime: existing.runtime,
      artifact: existing.artifact,
      restartPolicy: existing.restartPolicy,
      replicas: existing.replicas,
      selector: existing.selector,
      gpus: existing.gpus,
      memoryMiB: existing.memoryMiB,
    });
    if (before === JSON.stringify(spec)) return { id: existing.id, generation: existing.generation, changed: false };
    const generation = existing.generation + 1;
    await tx.db.update(deployments).set({ ...spec, generation, updatedAt: sql`now()` }).where(eq(deployments.id, existing.id));
    await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.update', target: existing.id, details: { generation } });
    return { id: existing.id, generation, changed: true };
  });
}
