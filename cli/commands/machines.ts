import type { Command } from 'commander';
import { MachineView } from '../../shared/contracts/machine.js';
import { CliError, type ApiClient } from '../client.js';
import { age, connect, JSON_FLAG, print, listCommand } from '../context.js';
import { timeoutMs, waitUntil } from '../progress.js';
import { table } from '../table.js';

const gpuSummary = (m: MachineView) => (m.inventory.gpus.length ? `${m.inventory.gpus.length}x ${m.inventory.gpus[0]!.name}` : '-');

/** The machine's GPUs left free of its GPUs, as placement counts them: what replicas and run workers reserve is not. */
const freeGpus = (m: MachineView) => `${m.resources.free.gpus}/${m.resources.capacity.gpus}`;

/** What the machine offers, what its replicas and run workers reserve, and what is free: one row per resource. */
function resourcesTable(m: MachineView): string {
  const { capacity, replicas, workers, free } = m.resources;
  const row = (what: string, key: 'gpus' | 'memoryMiB' | 'cores') => [what, ...[capacity, replicas, workers, free].map((r) => String(r[key]))];
  return table(['RESOURCE', 'CAPACITY', 'REPLICAS', 'WORKERS', 'FREE'], [row('gpus', 'gpus'), row('memory MiB', 'memoryMiB'), row('cores', 'cores')]);
}

/** A machine named by id, or by its name (resolved through the list). */
export async function findMachine(api: ApiClient, nameOrId: string): Promise<MachineView> {
  if (/^mch_/.test(nameOrId)) return await api.answer(api.http.GET('/machines/{id}', { params: { path: { id: nameOrId } } }), MachineView);
  const match = (await api.all('/machines', MachineView)).filter((m) => m.name === nameOrId && m.revokedAt === null);
  if (match.length === 0) throw new CliError(`no machine named ${nameOrId} (see \`lunanexa machines ls\`)`, 1);
  return match[0]!;
}

/** A reported number, or `-` where the part reports none. */
const shown = (value: number | null, unit = '') => (value === null ? '-' : `${Math.round(value)}${unit}`);

/** Its GPUs as its agent last sampled them (docs/telemetry.md): empty while the machine is not ready. */
function gpuTable(m: MachineView): string {
  if (m.gpus.length === 0) return m.inventory.gpus.length ? 'telemetry:  none reported lately' : 'telemetry:  no GPU';
  return table(
    ['GPU', 'UTIL', 'MEMORY MiB', 'TEMP', 'POWER'],
    m.gpus.map((g) => [
      String(g.index),
      shown(g.utilizationPercent, '%'),
      g.memoryUsedMiB === null ? '-' : `${Math.round(g.memoryUsedMiB)}/${shown(g.memoryTotalMiB)}`,
      shown(g.temperatureC, ' C'),
      shown(g.powerDrawW, ' W'),
    ]),
  );
}

function describe(m: MachineView): string {
  const flags = [m.cordoned && 'cordoned', m.draining && (m.drained ? 'drained' : 'draining'), m.shared && 'shared', m.revokedAt && 'revoked']
    .filter(Boolean)
    .join(', ');
  const lines = [
    `name:       ${m.name}`,
    `id:         ${m.id}`,
    `state:      ${m.state}${flags ? ` (${flags})` : ''}`,
    `heartbeat:  ${age(m.heartbeatAgeMs)} ago, stream ${m.streamAttached ? 'attached' : 'not attached'}`,
    `labels:     ${
      Object.entries(m.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || '-'
    }`,
    `gpus:       ${m.inventory.gpus.map((g) => `${g.name}${g.memoryTotalMiB === null ? '' : ` (${Math.round(g.memoryTotalMiB / 1024)} GiB)`}`).join(', ') || 'none'}`,
    `warm:       ${m.warmModels.join(', ') || '-'}`,
    '',
    resourcesTable(m),
    '',
    gpuTable(m),
    '',
    table(
      ['RUNTIME', 'DEPLOYMENT', 'MODEL', 'STATE', 'ROUTABLE', 'ACTIVE', 'QUEUED', 'ENGINE RUN/WAIT', 'KV', 'RESTARTS'],
      m.runtimes.map((r) => [
        r.assignmentId,
        r.deploymentName,
        r.model,
        r.state,
        r.routable ? 'yes' : 'no',
        String(r.activeInvocations),
        String(r.queueDepth),
        r.engine ? `${shown(r.engine.requestsRunning)}/${shown(r.engine.requestsWaiting)}` : '-',
        r.engine?.kvCacheUsage != null ? `${Math.round(r.engine.kvCacheUsage * 100)}%` : '-',
        String(r.restarts),
      ]),
    ),
  ];
  for (const failure of m.attention) lines.push(`attention:  ${JSON.stringify(failure)}`);
  return lines.join('\n');
}

export function registerMachines(program: Command): void {
  const machines = program.command('machines').description('the fleet');
  listCommand(program, machines, {
    description: 'list machines: state, heartbeat age, GPUs and how many are free, runtimes',
    path: '/machines',
    item: MachineView,
    header: ['NAME', 'STATE', 'HEARTBEAT', 'STREAM', 'GPUS', 'FREE', 'RUNTIMES', 'SCHEDULING', 'ID'],
    row: (m) => [
      m.name,
      m.state,
      age(m.heartbeatAgeMs),
      m.streamAttached ? 'attached' : '-',
      gpuSummary(m),
      freeGpus(m),
      String(m.runtimes.length),
      [m.draining ? 'draining' : m.cordoned ? 'cordoned' : null, m.shared ? 'shared' : null].filter(Boolean).join(',') || '-',
      m.id,
    ],
  });
  machines
    .command('show <machine>')
    .description("one machine (name or id): inventory, what is reserved and free, its GPUs' live telemetry, runtimes and their engines, open failures")
    .option(...JSON_FLAG)
    .action(async (machine: string, opts: { json?: boolean }) => {
      const m = await findMachine(await connect(program), machine);
      print(opts.json, m, () => describe(m));
    });
  for (const verb of ['cordon', 'uncordon'] as const) {
    machines
      .command(`${verb} <machine>`)
      .description(verb === 'cordon' ? 'stop new placements on a machine; what runs keeps serving' : 'allow placements again (also ends a drain)')
      .option(...JSON_FLAG)
      .action(async (machine: string, opts: { json?: boolean }) => {
        const api = await connect(program);
        const m = await findMachine(api, machine);
        const after = await api.answer(api.http.POST(`/machines/{id}/${verb}`, { params: { path: { id: m.id } } }), MachineView);
        print(opts.json, after, () => `${after.name}: ${verb === 'cordon' ? 'cordoned' : 'schedulable'}`);
      });
  }
  for (const verb of ['share', 'unshare'] as const) {
    machines
      .command(`${verb} <machine>`)
      .description(
        verb === 'share'
          ? "lend a machine to the fleet's run queue: runs of every workspace may place workers on it (admin)"
          : "take a machine back from the fleet's run queue: other workspaces' workers on it run until they end (admin)",
      )
      .option(...JSON_FLAG)
      .action(async (machine: string, opts: { json?: boolean }) => {
        const api = await connect(program);
        const m = await findMachine(api, machine);
        const after = await api.answer(api.http.POST(`/machines/{id}/${verb}`, { params: { path: { id: m.id } } }), MachineView);
        print(opts.json, after, () => `${after.name}: ${after.shared ? "shared with the fleet's run queue" : 'kept to its workspace'}`);
      });
  }
  machines
    .command('drain <machine>')
    .description('move every replica off a machine, each replacement ready before the old one stops')
    .option('--wait', 'wait until the machine is empty')
    .option('--timeout <seconds>', 'how long --wait waits', '600')
    .option(...JSON_FLAG)
    .action(async (machine: string, opts: { wait?: boolean; timeout: string; json?: boolean }) => {
      const api = await connect(program);
      const m = await findMachine(api, machine);
      const machineId = { params: { path: { id: m.id } } };
      let after = await api.answer(api.http.POST('/machines/{id}/drain', machineId), MachineView);
      if (opts.wait) {
        await waitUntil(
          `draining ${after.name}`,
          async () => {
            after = await api.answer(api.http.GET('/machines/{id}', machineId), MachineView);
            const left = after.runtimes.length;
            return { done: after.drained, state: after.drained ? 'empty' : `${left} replica${left === 1 ? '' : 's'} left` };
          },
          { timeoutMs: timeoutMs(opts.timeout) },
        );
      }
      print(opts.json, after, () => `${after.name}: ${after.drained ? 'drained' : 'draining'} (${after.runtimes.length} replicas on it)`);
    });
  machines
    .command('revoke <machine>')
    .description('revoke a machine: its stream closes at once, its credentials stop working')
    .option('--reason <text>', 'recorded in the audit log')
    .option(...JSON_FLAG)
    .action(async (machine: string, opts: { reason?: string; json?: boolean }) => {
      const api = await connect(program);
      const m = await findMachine(api, machine);
      const after = await api.answer(
        api.http.POST('/machines/{id}/revoke', { params: { path: { id: m.id } }, body: opts.reason ? { reason: opts.reason } : {} }),
        MachineView,
      );
      print(opts.json, after, () => `${after.name}: revoked at ${after.revokedAt}`);
    });
}
