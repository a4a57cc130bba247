import type { SimNode } from '../../functions/hosts/dev/fleet.js';
import type { PrivateCluster } from '../helpers/private-pg.js';
import { servingOn, simulatedDeployment, type Api } from './api.js';
import { secondsUntil } from './measure.js';
import { simNodes } from './nodes.js';
import { controlPlane, privateDatabase, type ChaosPlane } from './planes.js';
import type { ScenarioContext } from './scenario.js';

export const NODE_NAMES = ['gpu-1', 'gpu-2', 'gpu-3', 'gpu-4'] as const;

/** Whether `count` machines are ready with their stream attached. */
export async function machinesReady(api: Api, count: number): Promise<boolean> {
  const list = await api.machines();
  return list.length === count && list.every((m) => m.state === 'ready' && m.streamAttached);
}

/** Whether `count` replicas of `name` serve. */
export async function replicasServing(api: Api, name: string, count: number): Promise<boolean> {
  return servingOn(await api.deployment(name)).length === count;
}

/** Waits (bounded) until the fleet serves: a setup that does not get there is an error of the run, not a result. */
export async function waitUntilServing(api: Api, name: string, machines: number, replicas: number, timeoutMs = 180_000): Promise<number> {
  const took = await secondsUntil(async () => (await machinesReady(api, machines)) && (await replicasServing(api, name, replicas)), {
    timeoutMs,
    intervalMs: 500,
  });
  if (took === null) throw new Error(`${machines} ready machines serving ${replicas} replicas of ${name} not reached within ${timeoutMs / 1000} s`);
  return took;
}

export interface Fleet {
  cluster: PrivateCluster;
  plane: ChaosPlane;
  nodes: SimNode[];
}

/**
 * The fleet most scenarios fault: a private PostgreSQL cluster, one control plane process with `env`, the
 * simulated deployment `model` with `replicas`, and four simulated nodes (real agents), serving.
 */
export async function startFleet(
  ctx: ScenarioContext,
  opts: { model: string; replicas: number; env?: Record<string, string>; runtime?: Parameters<typeof simulatedDeployment>[2]; spec?: Record<string, unknown> },
): Promise<Fleet> {
  const cluster = await privateDatabase(ctx.scope);
  const plane = await controlPlane(ctx.scope, { name: 'a', databaseUrl: cluster.url, dir: ctx.dir, env: opts.env });
  await plane.api.putDeployment(opts.model, simulatedDeployment(opts.model, opts.replicas, opts.runtime, opts.spec));
  ctx.log(`control plane on ${plane.url} (PostgreSQL on port ${cluster.port}); starting ${NODE_NAMES.length} simulated nodes`);
  const nodes = await simNodes(ctx.scope, { url: plane.url, databaseUrl: cluster.url, names: NODE_NAMES, dir: ctx.dir });
  const took = await waitUntilServing(plane.api, opts.model, NODE_NAMES.length, opts.replicas);
  ctx.log(`fleet serving ${opts.replicas} replicas after ${took} s`);
  return { cluster, plane, nodes };
}
