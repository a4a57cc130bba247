import type { Hono } from 'hono';
import { ApiError, parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { Heartbeat, type HeartbeatResponse } from '../../../shared/contracts/heartbeat.js';
import { recordHeartbeat } from '../../services/heartbeats.js';
import { machineAuth } from '../http/machine-auth.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';

/** POST /agent/v1/heartbeat: the machine's report of itself and its runtimes. */
export function registerHeartbeat(app: Hono<AppEnv>) {
  app.post('/heartbeat', machineAuth, async (c) => {
    const ports = c.get('ports');
    const machine = c.get('machine');
    const heartbeat = parseOr400(Heartbeat, parseJsonOr400(c.get('rawBody')));
    let result;
    try {
      result = await recordHeartbeat({ ctx: serviceCtx(ports, machine.machineId), input: { machine, heartbeat } });
    } catch (error) {
      if (error instanceof ApiError) ports.metrics.heartbeats.inc({ result: error.code });
      throw error;
    }
    ports.metrics.heartbeats.inc({ result: 'ok' });
    if (result.ignoredWorkers > 0) ports.metrics.workerReportsIgnored.inc(result.ignoredWorkers);
    // A runtime became ready, or stopped being, or left the node: the verb has reconciled, and routing follows at once.
    if (result.runtimesChanged) ports.dataPlane.routing.invalidate();
    // Allow-listed names only: a machine cannot grow the control plane's series by inventing names.
    ports.metrics.nodeMetrics.report(machine.machineId, machine.workspaceId, heartbeat.metrics, {
      gpus: heartbeat.gpus,
      engines: heartbeat.runtimes.map((r) => ({ assignmentId: r.assignmentId, engine: r.engine })),
    });
    const body: HeartbeatResponse = { accepted: true, desiredGen: result.desiredGen, heartbeatIntervalMs: ports.config.heartbeatIntervalMs };
    return c.json(body);
  });
}
