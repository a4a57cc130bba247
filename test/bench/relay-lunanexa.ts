import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { freePort } from '../../agent/runtimes/process.js';
import { build } from '../../scripts/build.mjs';
import { writeSimPolicy } from '../../functions/hosts/dev/fleet.js';
import { waitFor } from '../helpers/plane.js';
import { allPages } from '../helpers/pages.js';
import { pidsByCommandLine, withDescendants, type Tracked } from './proc-cpu.js';
import { exited, spawnLogged } from './spawned.js';

/** BENCH_PROFILE_DIR=dir writes a CPU profile of every process of the relay path there (runtimes included). */
const CPU_PROFILE = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
const AGENT_DIAG = fileURLToPath(new URL('./agent-diag.mjs', import.meta.url));

export interface Instance {
  url: string;
  token: string;
  pid: number;
}

export interface SimulatedDeployment {
  model: string;
  tokensPerSecond: number;
}

/**
 * The two programs a LunaNexa setup runs (the control-plane bundle and the agent bundle), and how its simulated
 * node's local policy is written: by the same code as its agent, whose policy schema it must match.
 */
export interface Bundles {
  controlPlane: string;
  agent: string;
  writePolicy: (stateDir: string) => Promise<string>;
}

/** The production bundles of this working tree (`npm run build`, the control plane and the agent only). */
export async function currentBundles(): Promise<Bundles> {
  const outputs = await build({ only: ['control-plane', 'agent'] });
  return { controlPlane: outputs['control-plane']!.path, agent: outputs.agent!.path, writePolicy: writeSimPolicy };
}

export interface LunaNexa {
  /** The node's stream is on B; A (two instances, via PostgreSQL) is started only when asked for. */
  b: Instance;
  a: Instance | null;
  /** Each deployment's runtime port, by model. */
  runtimePorts: Map<string, number>;
  processes: Tracked[];
}

/** `adminToken`: the store's, for an instance after its first (which alone writes one to its data dir). */
async function controlPlane(bundle: string, name: string, databaseUrl: string, logs: string, state: string, adminToken?: string): Promise<Instance> {
  const port = await freePort();
  const dataDir = join(state, name);
  if (adminToken) {
    await mkdir(dataDir, { recursive: true });
    await writeFile(join(dataDir, 'admin.token'), `${adminToken}\n`, { mode: 0o600 });
  }
  const env = { DATABASE_URL: databaseUrl, LUNANEXA_PORT: String(port), LUNANEXA_DATA_DIR: dataDir, LUNANEXA_LOG_LEVEL: 'warn' };
  const child = spawnLogged(process.execPath, [...CPU_PROFILE, bundle], env, join(logs, `${name}.log`));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${url}/readyz`)).ok, { timeoutMs: 90_000, what: `${name} ready` });
  const token = (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim();
  return { url, token, pid: child.pid! };
}

async function routes(instance: Instance, model: string): Promise<boolean> {
  const response = await fetch(`${instance.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${instance.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'ready?' }], max_tokens: 1, stream: true }),
  });
  await response.text();
  return response.ok;
}

/**
 * Two control planes on one PostgreSQL and one agent attached to B, from production bundles (`bundles`), as an
 * installation runs them: no TypeScript loader on the hot path. One simulated deployment per profile. `tag` ends
 * the name of each process group (" (before)"), so that two setups side by side are measured apart.
 */
export async function startLunaNexa(opts: {
  bundles: Bundles;
  tag?: string;
  databaseUrl: string;
  logs: string;
  state: string;
  twoInstances: boolean;
  deployments: SimulatedDeployment[];
}): Promise<LunaNexa> {
  const { controlPlane: plane, agent } = opts.bundles;
  const tag = opts.tag ?? '';
  const b = await controlPlane(plane, 'instance-b', opts.databaseUrl, opts.logs, opts.state);
  const a = opts.twoInstances ? await controlPlane(plane, 'instance-a', opts.databaseUrl, opts.logs, opts.state, b.token) : null;
  const api = (path: string, init: RequestInit = {}) =>
    fetch(`${b.url}${path}`, { ...init, headers: { authorization: `Bearer ${b.token}`, 'content-type': 'application/json' } });
  for (const d of opts.deployments) {
    const put = await api(`/api/v1/deployments/${d.model}`, {
      method: 'PUT',
      body: JSON.stringify({
        model: d.model,
        runtime: { kind: 'simulated', model: d.model, ttftMs: 0, tokensPerSecond: d.tokensPerSecond, loadMs: 0 },
        replicas: 1,
        selector: { bench: 'true' },
        maxConcurrency: 1024,
        queueCapacity: 8192,
      }),
    });
    if (!put.ok) throw new Error(`deployment ${d.model}: ${put.status} ${await put.text()}`);
  }
  const enrollment = (await (
    await api('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ name: 'bench-node', labels: { bench: 'true' } }) })
  ).json()) as { token: string };
  const stateDir = join(opts.state, 'node');
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const enroll = spawnLogged(
    process.execPath,
    [agent, 'enroll', '--url', b.url, '--token', '-', '--name', 'bench-node', '--state-dir', stateDir],
    { LUNANEXA_ENROLLMENT_TOKEN: enrollment.token },
    join(opts.logs, 'enroll.log'),
  );
  await exited(enroll);
  // The diagnostics preload reaches the agent only: a runtime's environment is built afresh, without NODE_OPTIONS.
  const nodeOptions = `${process.env.NODE_OPTIONS ?? ''} --import=${AGENT_DIAG}`.trim();
  const node = spawnLogged(
    process.execPath,
    [...CPU_PROFILE, agent, 'run', '--state-dir', stateDir, '--policy', await opts.bundles.writePolicy(stateDir), '--stop-runtimes-on-exit'],
    { NODE_OPTIONS: nodeOptions },
    join(opts.logs, 'agent.log'),
  );
  for (const d of opts.deployments) {
    await waitFor(
      async () => {
        const machines = await allPages<{ runtimes: Array<{ deploymentName: string; routable: boolean }> }>(api, '/api/v1/machines');
        return machines.some((m) => m.runtimes.some((r) => r.deploymentName === d.model && r.routable));
      },
      { timeoutMs: 90_000, what: `${d.model} routable` },
    );
    // Each instance routes from its own snapshot; wait until both see the replica.
    for (const instance of a ? [b, a] : [b]) await waitFor(() => routes(instance, d.model), { timeoutMs: 90_000, what: `${instance.url} routes ${d.model}` });
  }
  const runtimePorts = new Map<string, number>();
  const runtimePids: number[] = [];
  const records = join(stateDir, 'runtimes');
  for (const file of (await readdir(records)).filter((f) => f.endsWith('.json'))) {
    const record = JSON.parse(await readFile(join(records, file), 'utf8')) as { port: number; pid: number };
    const health = (await (await fetch(`http://127.0.0.1:${record.port}/health`)).json()) as { model: string };
    runtimePorts.set(health.model, record.port);
    runtimePids.push(record.pid);
  }
  const dbName = new URL(opts.databaseUrl).pathname.slice(1);
  const processes: Tracked[] = [
    { name: `control plane${tag}`, pids: () => [b.pid] },
    ...(a ? [{ name: `control plane A${tag}`, pids: () => [a.pid] }] : []),
    { name: `agent${tag}`, pids: () => [node.pid!] },
    { name: `runtime${tag}`, pids: () => runtimePids.flatMap(withDescendants) },
    // The backends serving this setup's own database (their titles name it), not the server's others.
    { name: `postgres${tag}`, pids: () => pidsByCommandLine((line) => line.startsWith('postgres: ') && line.includes(` ${dbName} `)) },
  ];
  return { b, a, runtimePorts, processes };
}
