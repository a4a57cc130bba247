import { join } from 'node:path';
import { enrollAgent } from '../../agent/agent.js';
import { startSimNode, type SimNode } from '../../functions/dev/fleet.js';
import type { RunningControlPlane } from '../../functions/node.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';

/**
 * Simulated nodes labelled `sim=true`, each a real agent process. They are enrolled through the real enrollment
 * path from the test's own process (the agent's code, over HTTP), which spares two cores one short-lived process
 * per node; `startSimNode` then finds them enrolled and runs each.
 */
export async function startEnrolledSimNodes(plane: RunningControlPlane, names: string[], nodesDir: string): Promise<SimNode[]> {
  await Promise.all(
    names.map(async (name) => {
      const { token } = await createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name, labels: { sim: 'true' }, ttlSeconds: 300 } });
      await enrollAgent({ url: plane.url, token, name, stateDir: join(nodesDir, name), log: () => {} });
    }),
  );
  return await Promise.all(names.map((name) => startSimNode(plane, name, nodesDir)));
}
