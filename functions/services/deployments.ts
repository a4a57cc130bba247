import { and, eq, isNull, sql } from 'drizzle-orm';
import { deployments } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { ArtifactPin, RestartPolicy, RuntimeSpec } from '../../shared/contracts/desired.js';
import type { DeploymentView } from '../../shared/contracts/deployment.js';
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
  /** Active adapter calls per replica; defaults to the column default, 16. */
  maxConcurrency?: number;
  /** Queued + running invocations of the deployment before 429; defaults to the column default, 256. */
  queueCapacity?: number;
}

type DeploymentRow = typeof deployments.$inferSelect;

function deploymentView(row: DeploymentRow): DeploymentView {
  return {
    id: row.id,
    name: row.name,
    model: row.model,
    runtime: row.runtime,
    artifact: row.artifact ?? null,
    restartPolicy: row.restartPolicy,
    replicas: row.replicas,
    selector: row.selector,
    gpus: row.gpus,
    memoryMiB: row.memoryMiB,
    maxConcurrency: row.maxConcurrency,
    queueCapacity: row.queueCapacity,
    generation: row.generation,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** One live deployment of a workspace, by id. */
export async function getDeployment({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; id: string } }): Promise<DeploymentView | undefined> {
  const [row] = await ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.id, input.id), isNull(deployments.deletedAt)));
  return row && deploymentView(row);
}

/** Live deployments of a workspace. */
export async function listDeployments({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } }): Promise<DeploymentView[]> {
  const rows = await ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), isNull(deployments.deletedAt)))
    .orderBy(deployments.name);
  return rows.map(deploymentView);
}

/**
 * Creates the deployment, or updates it (bumping its generation) when its spec differs; a no-op otherwise.
 * Capacity changes (concurrency, queue) apply at once through routing; spec changes roll the replicas.
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
      maxConcurrency: input.maxConcurrency ?? 16,
      queueCapacity: input.queueCapacity ?? 256,
    };
    if (!existing) {
      const id = newId('deployment');
      await tx.db.insert(deployments).values({ id, workspaceId: input.workspaceId, name: input.name, ...spec });
      await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.create', target: id, details: { name: input.name, replicas: input.replicas } });
      return { id, generation: 1, changed: true };
    }
    const before = JSON.stringify(Object.fromEntries(Object.keys(spec).map((key) => [key, existing[key as keyof typeof spec]])));
    if (before === JSON.stringify(spec)) return { id: existing.id, generation: existing.generation, changed: false };
    const generation = existing.generation + 1;
    await tx.db.update(deployments).set({ ...spec, generation, updatedAt: sql`now()` }).where(eq(deployments.id, existing.id));
    await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.update', target: existing.id, details: { generation } });
    return { id: existing.id, generation, changed: true };
  });
}
