import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { MachineList, MachineView } from '../../../shared/contracts/machine.js';
import { isId } from '../../../shared/ids.js';
import { clearReplicaFailures, getMachine, listMachinePage, revokeMachine, setMachineScheduling, setMachineSharing } from '../../services/machines.js';
import { fetchRuntimeLogs } from '../../services/runtime-logs.js';
import { machineTelemetry } from '../../services/telemetry.js';
import { MachineTelemetry, TelemetryQuery } from '../../../shared/contracts/telemetry.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses, MachineIdParam } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const list = guarded('viewer', {
  method: 'get',
  path: '/machines',
  summary: 'List machines with liveness, heartbeat age, inventory and runtimes, a page at a time in enrollment (id) order',
  request: { query: PageQuery },
  responses: { 200: { description: 'Machines', content: { 'application/json': { schema: MachineList } } }, ...errorResponses(400, 401, 403) },
});

const machinePages = keyset(
  z.string().refine((id) => isId('machine', id)),
  (m: MachineView) => m.id,
);

const get = guarded('viewer', {
  method: 'get',
  path: '/machines/{id}',
  summary: 'One machine',
  request: { params: MachineIdParam },
  responses: { 200: { description: 'Machine', content: { 'application/json': { schema: MachineView } } }, ...errorResponses(401, 403, 404) },
});

const RevokeBody = z.object({ reason: z.string().max(500).optional() });
const revoke = guarded('admin', {
  method: 'post',
  path: '/machines/{id}/revoke',
  summary: 'Revoke a machine: closes its stream at once and rejects its next request',
  request: { params: MachineIdParam, body: { content: { 'application/json': { schema: RevokeBody } }, required: false } },
  responses: { 200: { description: 'Revoked', content: { 'application/json': { schema: MachineView } } }, ...errorResponses(400, 401, 403, 404, 409) },
});

const SCHEDULING_SUMMARY = {
  cordon: 'Stop placing new replicas on a machine; its running replicas keep serving',
  drain: 'Move every replica off a machine (each replacement is ready before the old one is retired); `drained` turns true once it is empty',
  uncordon: 'Allow placements on a machine again (ends a drain)',
} as const;

/** `POST /machines/{id}/<verb>`, answered with the machine as it is after the verb. */
const machineVerbRoute = (role: 'operator' | 'admin', verb: string, summary: string) =>
  guarded(role, {
    method: 'post',
    path: `/machines/{id}/${verb}`,
    summary,
    request: { params: MachineIdParam },
    responses: { 200: { description: 'Done', content: { 'application/json': { schema: MachineView } } }, ...errorResponses(401, 403, 404, 409) },
  });

const SHARING_SUMMARY = {
  share: "Lend a machine to the fleet's run queue: runs of every workspace may place workers on it (its replicas stay this workspace's)",
  unshare: "Take a machine back from the fleet's run queue: other workspaces' workers on it run on until they end, none is placed anew",
} as const;

const clearFailures = guarded('operator', {
  method: 'post',
  path: '/machines/{id}/clear-failures',
  summary: "Clear a machine's replica failures (its `attention` list): the deployments they kept off it may be placed there again",
  request: { params: MachineIdParam },
  responses: { 200: { description: 'Cleared', content: { 'application/json': { schema: MachineView } } }, ...errorResponses(401, 403, 404) },
});

const logs = guarded('operator', {
  method: 'get',
  path: '/machines/{id}/runtimes/{assignmentId}/logs',
  summary: "Tail of a runtime's log ring, fetched from the node over its own stream",
  request: {
    params: MachineIdParam.extend({ assignmentId: z.string().min(1).max(64) }),
    query: z.object({ lines: z.coerce.number().int().min(1).max(1000).default(100) }),
  },
  responses: {
    200: { description: 'Log lines', content: { 'application/json': { schema: z.object({ lines: z.array(z.string()) }) } } },
    ...errorResponses(400, 401, 403, 404, 409),
  },
});

const telemetry = guarded('viewer', {
  method: 'get',
  path: '/machines/{id}/telemetry',
  summary: "A machine's GPUs over time (utilisation, memory, temperature, power), from the samples of its heartbeats",
  request: { params: MachineIdParam, query: TelemetryQuery },
  responses: { 200: { description: 'GPU series', content: { 'application/json': { schema: MachineTelemetry } } }, ...errorResponses(400, 401, 403, 404) },
});

export function registerMachines(app: OpenAPIHono<AppEnv>) {
  app.openapi(telemetry, async (c) => {
    const series = await machineTelemetry({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, machineId: c.req.valid('param').id, query: c.req.valid('query') },
    });
    return c.json(series, 200);
  });
  app.openapi(logs, async (c) => {
    const ports = c.get('ports');
    const { id, assignmentId } = c.req.valid('param');
    const lines = await fetchRuntimeLogs({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, machineId: id, assignmentId, lines: c.req.valid('query').lines },
    });
    return c.json({ lines }, 200);
  });
  app.openapi(list, async (c) => {
    const ports = c.get('ports');
    const { limit, cursor } = c.req.valid('query');
    const page = await listMachinePage({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: machinePages.after(cursor), limit },
    });
    return c.json(machinePages.page(page), 200);
  });
  app.openapi(get, async (c) => {
    const ports = c.get('ports');
    const view = await getMachine({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, machineId: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
  app.openapi(revoke, async (c) => {
    const ports = c.get('ports');
    const ctx = serviceCtx(ports, c.get('actor').tokenId);
    const input = { workspaceId: c.get('actor').workspaceId, machineId: c.req.valid('param').id };
    const body = c.req.header('content-length') === '0' || !c.req.header('content-type') ? {} : c.req.valid('json');
    await revokeMachine({ ctx, input: { ...input, reason: body.reason } });
    return c.json(await getMachine({ ctx, input }), 200);
  });
  for (const verb of ['cordon', 'drain', 'uncordon'] as const) {
    app.openapi(machineVerbRoute('operator', verb, SCHEDULING_SUMMARY[verb]), async (c) => {
      const ports = c.get('ports');
      const ctx = serviceCtx(ports, c.get('actor').tokenId);
      const input = { workspaceId: c.get('actor').workspaceId, machineId: c.req.valid('param').id };
      await setMachineScheduling({ ctx, input: { ...input, verb } });
      return c.json(await getMachine({ ctx, input }), 200);
    });
  }
  for (const verb of ['share', 'unshare'] as const) {
    // Admin: sharing lets other workspaces' work run on the machine.
    app.openapi(machineVerbRoute('admin', verb, SHARING_SUMMARY[verb]), async (c) => {
      const ports = c.get('ports');
      const ctx = serviceCtx(ports, c.get('actor').tokenId);
      const input = { workspaceId: c.get('actor').workspaceId, machineId: c.req.valid('param').id };
      await setMachineSharing({ ctx, input: { ...input, verb } });
      return c.json(await getMachine({ ctx, input }), 200);
    });
  }
  app.openapi(clearFailures, async (c) => {
    const ports = c.get('ports');
    const ctx = serviceCtx(ports, c.get('actor').tokenId);
    const input = { workspaceId: c.get('actor').workspaceId, machineId: c.req.valid('param').id };
    await clearReplicaFailures({ ctx, input });
    return c.json(await getMachine({ ctx, input }), 200);
  });
}
