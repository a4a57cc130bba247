import type { Command } from 'commander';
import { CommandSubmission, JobSubmission, JobView } from '../../shared/batch/job.js';
import { CliError, type ApiClient } from '../client.js';
import { checked, connect, JSON_FLAG, listCommand, print, readDocument } from '../context.js';
import { timeoutMs, waitUntil } from '../progress.js';
import { printTail, tailLines, tailOptions, type TailOptions } from './logs.js';
import { WorkerLogs } from '../../shared/contracts/run-view.js';

const FINAL = new Set(['completed', 'failed', 'cancelled', 'expired']);

/** Rows done of the total, with the rate and time left while it runs. */
function progressText(j: JobView): string {
  const done = j.rows.succeeded + j.rows.failed;
  const of = j.rows.total === null ? '' : ` of ${j.rows.total}`;
  const rate = j.rate === null ? '' : `, ${j.rate.toFixed(1)} rows/s`;
  const eta = j.etaMs === null || FINAL.has(j.state) ? '' : `, ${Math.ceil(j.etaMs / 1000)} s left`;
  return `${done}${of} rows (${j.rows.failed} failed)${rate}${eta}`;
}

function inputText(spec: JobView['spec']): string {
  if (spec.kind === 'command') return `command ${spec.command.template} ${JSON.stringify(spec.command.params)}, model ${spec.command.model || '-'}`;
  return `${spec.inputFileId}${spec.kind === 'rows' ? ` (${spec.format}, ${spec.rows.kind} on ${spec.rows.model})` : ` (${spec.endpoint})`}`;
}

function describe(j: JobView): string {
  return [
    `id:         ${j.id} (${j.kind})`,
    `state:      ${j.state}${j.reason ? `: ${j.reason}` : ''}, attempt ${j.attempt + 1}`,
    `rows:       ${progressText(j)}`,
    `input:      ${inputText(j.spec)}`,
    `output:     ${j.outputFileId ?? '-'}${j.errorFileId ? `, errors ${j.errorFileId}` : ''}`,
    `created:    ${j.createdAt}${j.startedAt ? `, started ${j.startedAt}` : ''}${j.finishedAt ? `, finished ${j.finishedAt}` : ''}`,
  ].join('\n');
}

async function findJob(api: ApiClient, id: string): Promise<JobView> {
  if (!/^job_/.test(id)) throw new CliError(`${id} is not a job id (job_...): see \`lunanexa jobs ls\``, 2);
  return await api.answer(api.http.GET('/jobs/{id}', { params: { path: { id } } }), JobView);
}

export function registerJobs(program: Command): void {
  const jobs = program
    .command('jobs')
    .alias('job')
    .description('work against the fleet’s models: built-in row jobs and OpenAI batches, checkpointed row by row');
  jobs
    .command('submit')
    .description(
      'submit a job from a YAML or JSON file (`-` reads stdin): rows {rows: {kind, model, defaults}, inputFileId, format, swarm?}, or a command {command: {template, params, model?, resources?}, swarm?} (operator)',
    )
    .requiredOption('-f, --file <file>', 'the job')
    .option('--swarm <name>', "submit it to a swarm: its model, backend and limits default to the swarm's")
    .option('--wait', 'wait until it ends, showing its progress')
    .option('--timeout <seconds>', 'how long --wait waits', '3600')
    .option(...JSON_FLAG)
    .action(async (opts: { file: string; swarm?: string; wait?: boolean; timeout: string; json?: boolean }) => {
      const document = await readDocument(opts.file);
      const withSwarm = opts.swarm === undefined || typeof document !== 'object' || document === null ? document : { ...document, swarm: opts.swarm };
      const api = await connect(program);
      // A document with a `command` is a command job (docs/jobs.md, "Commands"); else rows.
      const command = typeof withSwarm === 'object' && withSwarm !== null && 'command' in withSwarm;
      let job = command
        ? await api.answer(api.http.POST('/jobs/commands', { body: checked(CommandSubmission, withSwarm, opts.file) }), JobView)
        : await api.answer(api.http.POST('/jobs', { body: checked(JobSubmission, withSwarm, opts.file) }), JobView);
      if (opts.wait) {
        await waitUntil(
          `job ${job.id}`,
          async () => {
            job = await findJob(api, job.id);
            return { done: FINAL.has(job.state), state: `${job.state}: ${progressText(job)}` };
          },
          { timeoutMs: timeoutMs(opts.timeout) },
        );
      }
      print(opts.json, job, () => describe(job));
    });
  listCommand(program, jobs, {
    description: "list the workspace's jobs, batches included, newest first, with their progress",
    path: '/jobs',
    item: JobView,
    header: ['ID', 'KIND', 'STATE', 'PROGRESS', 'CREATED', 'OUTPUT'],
    row: (j) => [j.id, j.kind, j.state, progressText(j), j.createdAt, j.outputFileId ?? '-'],
  });
  jobs
    .command('show <job>')
    .description('one job: state, rows done and failed, rate, time left, its output files')
    .option(...JSON_FLAG)
    .action(async (id: string, opts: { json?: boolean }) => {
      const job = await findJob(await connect(program), id);
      print(opts.json, job, () => describe(job));
    });
  jobs
    .command('cancel <job>')
    .description('cancel a job: it stops, and its output keeps the rows it finished (operator)')
    .option(...JSON_FLAG)
    .action(async (id: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      await findJob(api, id);
      const job = await api.answer(api.http.POST('/jobs/{id}/cancel', { params: { path: { id } } }), JobView);
      print(opts.json, job, () => `${job.id}: ${job.state}, keeping the ${job.rows.succeeded + job.rows.failed} rows it finished`);
    });
  tailOptions(jobs.command('logs <job>').description("its runner's log tail, fetched from the node that runs it (the agent backend; operator)")).action(
    async (id: string, opts: TailOptions) => {
      const lines = tailLines(opts);
      const api = await connect(program);
      await findJob(api, id);
      const params = { path: { id }, query: { lines } };
      await printTail(opts, async () => (await api.answer(api.http.GET('/jobs/{id}/logs', { params }), WorkerLogs)).lines);
    },
  );
}
