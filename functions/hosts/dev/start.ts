import { join, resolve } from 'node:path';
import { NodeEnv, configFromEnv } from '../node-env.js';
import { peerFromEnv, startControlPlane } from '../node.js';
import { listMachines } from '../../services/machines.js';
import { ensureJobTemplates, seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from './fleet.js';
import { watchUntilReady } from './ready-watch.js';
import { buildAgentBundle } from './agent-program.js';

/**
 * `npm start`: the control plane on the embedded store (or DATABASE_URL) with LUNANEXA_SIM_NODES simulated
 * nodes `dgx-1`...`dgx-N`, each a separate agent process with one simulated GB10, serving the demo deployment
 * `sim-chat` and running runs of the `sim-job` template (docs/runs.md).
 */
const env = NodeEnv.parse(process.env);
// On the embedded store there is one instance and no peer channel: say so rather than ignore the variables.
const peerVars = Object.keys(process.env).filter((name) => name.startsWith('LUNANEXA_PEER_') && process.env[name]);
if (!env.DATABASE_URL && peerVars.length > 0)
  console.log(`${peerVars.join(', ')}: no peer channel on the embedded store (one instance); they apply with DATABASE_URL`);
const startedAt = performance.now();
const dataDir = resolve(env.LUNANEXA_DATA_DIR);
const count = env.LUNANEXA_SIM_NODES;
// The nodes' agent, bundled from this source tree while the store opens (esbuild works in a process of its own).
const bundling = count > 0 ? buildAgentBundle(join(dataDir, 'agent')) : null;
const plane = await startControlPlane({
  port: env.LUNANEXA_PORT,
  host: env.LUNANEXA_HOST,
  dataDir,
  databaseUrl: env.DATABASE_URL,
  databaseOwnerUrl: env.LUNANEXA_DATABASE_OWNER_URL,
  // As on the production entry: the peer channel (DATABASE_URL only; the embedded store is one instance) listens and
  // advertises where LUNANEXA_PEER_HOST/PORT/URL say, with TLS where LUNANEXA_PEER_TLS_* do.
  peer: await peerFromEnv(env),
  // The demo's /metrics is open to anyone who can reach 127.0.0.1; a deployment keeps the default (a token: its workspace's series).
  config: { ...configFromEnv(env), metricsPublic: true },
});
if (count > 0) {
  await seedDemoDeployment(plane, count);
  await ensureJobTemplates(plane);
  await bundling;
}
const nodes: SimNode[] = await Promise.all(
  Array.from({ length: count }, (_, i) => startSimNode(plane, `dgx-${i + 1}`, join(dataDir, 'nodes'), { telemetryMs: 5_000 })),
);

// Only what is served: the console, the APIs, metrics.
console.log(`
LunaNexa control plane  ${plane.url}
web console             ${plane.url}/  (sign in with the admin token below)
management API          ${plane.url}/api/v1  (OpenAPI: ${plane.url}/api/v1/openapi.json)
inference (OpenAI)      ${plane.url}/v1
metrics                 ${plane.url}/metrics
admin token             ${plane.adminToken === null ? 'none written: the store has an admin token already (see the warning above; npm run db:bootstrap)' : `${plane.adminTokenPath}  (mode 0600)`}
store                   ${env.DATABASE_URL ? 'DATABASE_URL' : join(dataDir, 'store')}${plane.peerUrl ? `\npeer channel            ${plane.peerUrl}` : ''}
simulated nodes         ${nodes.map((n) => n.name).join(', ') || 'none'}${count > 0 ? `  (agent logs in ${join(dataDir, 'nodes')}/<name>/agent.log)` : ''}

  curl -H "Authorization: Bearer $(cat ${plane.adminTokenPath})" ${plane.url}/api/v1/machines
`);

let shuttingDown = false;
async function shutdown(signal: string) {
  if (shuttingDown) return;
  shuttingDown = true;
  console.log(`\n${signal}: stopping ${nodes.length} agents and the control plane...`);
  watch?.stop();
  await stopSimNodes(nodes);
  await plane.close();
  console.log('stopped cleanly');
  process.exit(0);
}
// A stop that fails (the store is away while the last records are written) still ends the process, and says why.
const stopOn = (signal: string) => () =>
  void shutdown(signal).catch((error: unknown) => {
    console.log(`stopping failed: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  });
process.once('SIGINT', stopOn('SIGINT'));
process.once('SIGTERM', stopOn('SIGTERM'));

for (const node of nodes) {
  node.process.once('exit', (code, signal) => {
    if (!shuttingDown) console.log(`agent ${node.name} exited (code ${code}, signal ${signal}); see ${node.logFile}`);
  });
}

// Without simulated nodes there is nothing to announce.
const watch =
  count > 0
    ? watchUntilReady({
        intervalMs: 250,
        check: async () => {
          const machines = await listMachines({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId } });
          return machines.filter((m) => m.state === 'ready' && m.runtimes.some((r) => r.routable)).length >= count;
        },
        onReady: () => console.log(`${count} simulated nodes ready with sim-chat routable after ${((performance.now() - startedAt) / 1000).toFixed(1)} s`),
        onError: (error) => {
          plane.ports.metrics.backgroundErrors.inc({ task: 'ready-watch' });
          console.log(`waiting for the simulated nodes: the store did not answer (${error instanceof Error ? error.message : String(error)}); still waiting`);
        },
      })
    : undefined;
