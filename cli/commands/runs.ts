import type { Command } from 'commander';
import { RunDetail, RunQueueStanding, RunSubmission, RunView, WorkerLogs } from '../../shared/contracts/run-view.js';
import { CliError, type ApiClient } from '../client.js';
import { checked, connect, JSON_FLAG, listCommand, print, readDocument } from '../context.js';
import { table } from '../table.js';
import { printTail, tailLines, tailOptions, type TailOptions } from './logs.js';

/** What `show --json` adds to a run beside its name and spec: dropped from a run file, so that output can be submitted again. */
const VIEW_FIELDS = new Set(Object.keys(RunDetail.shape).filter((key) => key !== 'name' && key !== 'spec'));

/** A run file (YAML or JSON): `{name, spec}` as `POST /runs` takes it, or what `runs show --json` printed. */
export async function readRunFile(path: string): Promise<RunSubmission> {
  const document = await readDocument(path);
  if (typeof document !== 'object' || document === null || Array.isArray(document)) throw new CliError(`${path}: a run file is {name, spec}`, 2);
  // What `show --json` printed is known by its id. Otherwise a field beside `spec` is most likely one meant inside it
  // (`priority:` one level too high): refused, never silently dropped.
  const shown = 'id' in document;
  const extra = Object.keys(document).filter((key) => key !== 'name' && key !== 'spec' && !(shown && VIEW_FIELDS.has(key)));
  if (extra.length) throw new CliError(`${path}: unknown field ${extra.join(', ')} (a run file is {name, spec}; the run's fields go under spec)`, 2);
  const { name, spec } = document as { name?: unknown; spec?: unknown };
  return checked(RunSubmission, { name, spec }, path);
}

/** A run named by id, or by name: the live run of that name, else the latest one. */
async function findRun(api: ApiClient, nameOrId: string): Promise<RunView> {
  if (/^run_/.test(nameOrId)) return await api.answer(api.http.GET('/runs/{id}', { params: { path: { id: nameOrId } } }), RunDetail);
  const named = (await api.all('/runs', RunView)).filter((r) => r.name === nameOrId);
  const found = named.find((r) => r.finishedAt === null) ?? named.at(-1);
  if (!found) throw new CliError(`no run named ${nameOrId} (see \`lunanexa runs ls\`)`, 1);
  return found;
}

/** Where a run stands in a few words: its state and, while it waits, its place in the queue. */
const standing = (r: RunView) => (r.position === null ? r.state : `${r.state}, queue position ${r.position}`);

/** The events `runs show` prints unless told otherwise: the latest. */
const SHOWN_EVENTS = '20';

function describe(r: RunDetail, events: number): string {
  const workerNames = new Map(r.workers.map((w) => [w.id, w.name]));
  const lines = [
    `name:       ${r.name} (${r.id})`,
    `state:      ${standing(r)}${r.reason ? `: ${r.reason}` : ''}`,
    `template:   ${r.spec.template}, priority ${r.priority}, ${r.workerCount} workers${r.spec.gang ? ', gang' : ''}, on failure ${r.spec.failurePolicy.action}`,
    `restarts:   ${r.restarts}`,
    `submitted:  ${r.submittedAt}${r.startedAt ? `, started ${r.startedAt}` : ''}${r.finishedAt ? `, finished ${r.finishedAt}` : ''}`,
    '',
    table(
      ['RANK', 'WORKER', 'MACHINE', 'STATE', 'ATTEMPT', 'EXIT', 'MESSAGE'],
      r.workers.map((w) => [
        String(w.rank),
        w.name,
        w.machineName ?? w.machineId ?? '-',
        w.state,
        String(w.attempt),
        w.exitCode === null ? '-' : String(w.exitCode),
        w.message ?? '',
      ]),
    ),
  ];
  const shown = r.events.slice(-events);
  if (shown.length)
    lines.push(
      '',
      shown.length < r.events.length ? `the last ${shown.length} of ${r.events.length} events:` : 'events:',
      table(
        ['AT', 'SUBJECT', 'FROM', 'TO', 'BY', 'REASON'],
        shown.map((e) => [e.at, e.workerId ? (workerNames.get(e.workerId) ?? e.workerId) : 'run', e.from, e.to, e.origin, e.reason]),
      ),
    );
  return lines.join('\n');
}

function describeStanding(s: RunQueueStanding): string {
  return [
    `fair share: ${s.gpuSeconds} GPU-seconds in the last ${Math.round(s.windowMs / 3_600_000)} h at weight ${s.weight} (share ${s.share})`,
    `holding:    ${s.gpusHeld} GPUs now`,
    `waiting:    ${s.waiting} runs${s.rank === null ? '' : `; ${s.rank} of ${s.competing} workspaces with runs waiting, by share`}`,
    `ceiling:    priority ${s.priorityCeiling}`,
  ].join('\n');
}

export function registerRuns(program: Command): void {
  const runs = program.command('runs').description('batch jobs on the fleet: queued, placed, started (a gang all together), restarted by policy');
  runs
    .command('submit')
    .description('submit a run from a YAML or JSON file (`-` reads stdin): its name and spec (operator)')
    .requiredOption('-f, --file <file>', 'the run: {name, spec}')
    .option(...JSON_FLAG)
    .action(async (opts: { file: string; json?: boolean }) => {
      const submission = await readRunFile(opts.file);
      const api = await connect(program);
      const detail = await api.answer(api.http.POST('/runs', { body: submission }), RunDetail);
      print(opts.json, detail, () => `${detail.name}: submitted as ${detail.id}, ${standing(detail)}${detail.reason ? ` (${detail.reason})` : ''}`);
    });
  runs
    .command('queue')
    .description("the workspace's standing in the fleet's run queue: GPU-seconds in the fair-share window, its share and its rank")
    .option(...JSON_FLAG)
    .action(async (opts: { json?: boolean }) => {
      const api = await connect(program);
      const standing = await api.answer(api.http.GET('/run-queue'), RunQueueStanding);
      print(opts.json, standing, () => describeStanding(standing));
    });
  listCommand(program, runs, {
    description: "list the workspace's runs: state, workers, and while one waits its queue position and why",
    path: '/runs',
    item: RunView,
    header: ['NAME', 'STATE', 'WORKERS', 'PRIORITY', 'QUEUE', 'SUBMITTED', 'ID', 'REASON'],
    row: (r) => [
      r.name,
      r.state,
      String(r.workerCount),
      String(r.priority),
      r.position === null ? '-' : String(r.position),
      r.submittedAt,
      r.id,
      r.reason ?? '',
    ],
  });
  runs
    .command('show <run>')
    .description('one run (name or id): its workers with machine, state, attempt and exit code, and its latest events')
    .option('--events <n>', 'how many of the latest events to show', SHOWN_EVENTS)
    .option(...JSON_FLAG)
    .action(async (run: string, opts: { events: string; json?: boolean }) => {
      const events = Number(opts.events);
      if (!Number.isInteger(events) || events < 0) throw new CliError(`--events must be a whole number, not ${opts.events}`, 2);
      const api = await connect(program);
      const { id } = await findRun(api, run);
      const detail = await api.answer(api.http.GET('/runs/{id}', { params: { path: { id } } }), RunDetail);
      print(opts.json, detail, () => describe(detail, events));
    });
  runs
    .command('cancel <run>')
    .description('cancel a live run (name or id): it fails (cancelled) and its machines stop its workers (operator)')
    .option(...JSON_FLAG)
    .action(async (run: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const { id } = await findRun(api, run);
      const view = await api.answer(api.http.POST('/runs/{id}/cancel', { params: { path: { id } } }), RunView);
      print(opts.json, view, () => `${view.name}: cancelled; its machines stop its workers`);
    });
  tailOptions(
    runs
      .command('logs <run>')
      .description("a worker's log tail (name or id; rank 0 unless --rank), fetched from its node while the worker is held there (operator)")
      .option('--rank <n>', "the worker's rank", '0'),
  ).action(async (run: string, opts: TailOptions & { rank: string }) => {
    const lines = tailLines(opts);
    const rank = Number(opts.rank);
    if (!Number.isInteger(rank) || rank < 0) throw new CliError(`--rank must be a whole number, not ${opts.rank}`, 2);
    const api = await connect(program);
    const { id } = await findRun(api, run);
    const params = { path: { id, rank: String(rank) }, query: { lines } };
    await printTail(opts, async () => (await api.answer(api.http.GET('/runs/{id}/workers/{rank}/logs', { params }), WorkerLogs)).lines);
  });
}
