import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { SimStats } from '../../sim/options.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { withEnroller } from './enroller.js';
import type { Scope } from './scenario.js';

/** A runtime the agent launched, as its record in `<state dir>/runtimes/` names it. */
export interface RuntimeRecord {
  assignmentId: string;
  pid: number;
  baseUrl: string;
  /** The token the runtime answers only to. */
  token: string;
}

export async function runtimeRecords(node: SimNode): Promise<RuntimeRecord[]> {
  const dir = join(node.stateDir, 'runtimes');
  const records: RuntimeRecord[] = [];
  for (const file of (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'))) {
    const record = await readFile(join(dir, file), 'utf8').then(
      (text) => JSON.parse(text) as RuntimeRecord,
      () => null,
    );
    if (record) records.push(record);
  }
  return records;
}

/** The pid of every runtime of `nodes`, by assignment: compared before and after a fault, it shows a relaunch. */
export async function runtimePids(nodes: readonly SimNode[]): Promise<Map<string, number>> {
  const pids = new Map<string, number>();
  for (const node of nodes) for (const record of await runtimeRecords(node)) pids.set(record.assignmentId, record.pid);
  return pids;
}

/** Whether `pid` is a simulated runtime now (a pid reused by another process is never touched). */
export async function isSimRuntime(pid: number): Promise<boolean> {
  return (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).includes('sim-runtime');
}

/** The simulator's own counters of every runtime on `node` that answers, summed. */
export async function simStats(node: SimNode): Promise<Pick<SimStats, 'requests' | 'completed' | 'aborted' | 'active' | 'tokensStreamed'>> {
  const total = { requests: 0, completed: 0, aborted: 0, active: 0, tokensStreamed: 0 };
  for (const record of await runtimeRecords(node)) {
    const response = await fetch(`${record.baseUrl}/sim/stats`, {
      headers: { authorization: `Bearer ${record.token}` },
      signal: AbortSignal.timeout(5_000),
    }).catch(() => null);
    if (!response?.ok) continue;
    const stats = (await response.json()) as SimStats;
    for (const key of Object.keys(total) as Array<keyof typeof total>) total[key] += stats[key];
  }
  return total;
}

/**
 * Enrolls and runs simulated nodes (real agent processes, real simulated runtimes) against the control plane at
 * `url`, minting their enrollment tokens in the database at `databaseUrl`. Stopped with the scenario: thawed
 * first (a stopped process cannot handle SIGTERM), then SIGTERM (the agent stops its runtimes), and any runtime
 * an agent left behind (one killed with SIGKILL leaves its runtimes running) is killed by its record.
 */
export async function simNodes(
  scope: Scope,
  opts: { url: string; databaseUrl: string; names: readonly string[]; dir: string; env?: (name: string) => NodeJS.ProcessEnv | undefined },
): Promise<SimNode[]> {
  const nodes: SimNode[] = [];
  scope.defer('simulated nodes', async () => {
    for (const node of nodes) node.process.kill('SIGCONT');
    await stopSimNodes(nodes.filter((n) => n.process.exitCode === null && n.process.signalCode === null));
    for (const node of nodes) {
      for (const record of await runtimeRecords(node)) {
        if (pidAlive(record.pid) && (await isSimRuntime(record.pid))) process.kill(-record.pid, 'SIGKILL');
      }
    }
  });
  await withEnroller({ databaseUrl: opts.databaseUrl, url: opts.url }, async (plane) => {
    const started = await Promise.allSettled(opts.names.map((name) => startSimNode(plane, name, join(opts.dir, 'nodes'), { env: opts.env?.(name) })));
    for (const outcome of started) if (outcome.status === 'fulfilled') nodes.push(outcome.value);
    const failed = started.find((outcome) => outcome.status === 'rejected');
    if (failed) throw failed.reason;
  });
  return nodes;
}

/** The runtime pid of the only runtime on `node` (a scenario's replica). */
export async function onlyRuntime(node: SimNode): Promise<RuntimeRecord> {
  const [record, ...others] = await runtimeRecords(node);
  if (!record || others.length) throw new Error(`${node.name} runs ${others.length + (record ? 1 : 0)} runtimes, not one`);
  return record;
}
