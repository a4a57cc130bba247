import { seedDemoDeployment } from '../../functions/hosts/dev/fleet.js';
import type { DeploymentInput } from '../../functions/services/deployments.js';
import type { TestPlane } from './plane.js';

/** Declares a small simulated deployment placed only on machines with `selector`. */
export async function applyTestDeployment(plane: TestPlane, name: string, selector: Record<string, string>, overrides: Partial<DeploymentInput> = {}) {
  return await seedDemoDeployment(plane, 1, { loadMs: 100, memoryMiB: 64 }, { name, selector, ...overrides });
}
