import { applyDeployment, type DeploymentInput } from '../../functions/services/deployments.js';
import type { TestPlane } from './plane.js';

/** Declares a small simulated deployment placed only on machines with `selector`. */
export async function applyTestDeployment(plane: TestPlane, name: string, selector: Record<string, string>, overrides: Partial<DeploymentInput> = {}) {
  return await applyDeployment({
    ctx: plane.systemCtx,
    input: {
      workspaceId: plane.workspaceId,
      name,
      model: 'sim-chat',
      runtime: { kind: 'simulated', model: 'sim-chat', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
      artifact: null,
      restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
      replicas: 1,
      selector,
      gpus: 0,
      memoryMiB: 64,
      ...overrides,
    },
  });
}
