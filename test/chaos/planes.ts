import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitForExit } from '../../functions/hosts/dev/fleet.js';
import { startBalancer, type Balancer } from '../helpers/balancer.js';
import { spawnControlPlane, type PlaneProcess } from '../helpers/plane-process.js';
import { startPrivateCluster, type PrivateCluster } from '../helpers/private-pg.js';
import { Api } from './api.js';
import type { Scope } from './scenario.js';

/** A private PostgreSQL cluster for one scenario: it may be stopped, and it is removed with the scenario. */
export async function privateDatabase(scope: Scope): Promise<PrivateCluster> {
  const cluster = await startPrivateCluster();
  scope.defer('the private PostgreSQL cluster', () => cluster.destroy());
  return cluster;
}

export interface ChaosPlane extends PlaneProcess {
  name: string;
  api: Api;
  alive(): boolean;
  /** Why the process ended, from its exit and its log: "exit 1: error: terminating connection due to administrator command". */
  exitReason(): Promise<string>;
}

/**
 * Instances on one database share the key that seals runtime secrets (docs/operations.md); one per run is
 * enough, and none is ever written to disk.
 */
const SECRET_KEY = randomBytes(32).toString('base64');

/** The admin token of each database, written by its first plane. */
const adminTokens = new Map<string, string>();

/**
 * A control plane in its own process on `databaseUrl`, with `env` (timing overrides read by functions/hosts/node-env.ts),
 * stopped with the scenario: SIGTERM, SIGKILL if it has not exited within 10 s.
 */
export async function controlPlane(scope: Scope, opts: { name: string; databaseUrl: string; dir: string; env?: Record<string, string> }): Promise<ChaosPlane> {
  const dataDir = join(opts.dir, `plane-${opts.name}`);
  // Only a store's first start writes an admin token; the planes after it get that one, as an operator would give it.
  const shared = adminTokens.get(opts.databaseUrl);
  if (shared) {
    await mkdir(dataDir, { recursive: true });
    await writeFile(join(dataDir, 'admin.token'), `${shared}\n`, { mode: 0o600 });
  }
  const plane = await spawnControlPlane({ databaseUrl: opts.databaseUrl, dataDir, env: { LUNANEXA_SECRET_KEY: SECRET_KEY, ...opts.env } });
  const alive = () => plane.process.exitCode === null && plane.process.signalCode === null;
  scope.defer(`control plane ${opts.name}`, async () => {
    if (!alive()) return;
    plane.process.kill('SIGTERM');
    await waitForExit(plane.process, 10_000).catch(() => plane.process.kill('SIGKILL'));
  });
  const token = (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim();
  if (!shared) adminTokens.set(opts.databaseUrl, token);
  const exitReason = async () => {
    const log = await readFile(plane.logFile, 'utf8').catch(() => '');
    const thrown = log
      .split('\n')
      .filter((line) => /^(\w*Error|error)\b.*:/.test(line))
      .at(-1);
    return `${plane.process.signalCode ?? `exit ${plane.process.exitCode}`}${thrown ? `: ${thrown}` : ''}`;
  };
  return { ...plane, name: opts.name, api: new Api(plane.url, token), alive, exitReason };
}

/** A TCP balancer in front of `planes`, closed with the scenario. */
export async function balancer(scope: Scope, planes: readonly ChaosPlane[], mode: 'failover' | 'round-robin'): Promise<Balancer> {
  const lb = await startBalancer(
    planes.map((p) => p.port),
    mode,
  );
  scope.defer(`the ${mode} balancer`, () => lb.close());
  return lb;
}
