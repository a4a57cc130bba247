import type { Command } from 'commander';
import {
  ApprovalRequest,
  CreateModelRequest,
  DecisionRequest,
  PromoteRequest,
  PromotionResult,
  RollbackResult,
  Manifest,
  ModelDetail,
  ModelView,
  RecordEvaluationRequest,
  RecordProvenanceRequest,
  RegisterVersionRequest,
  VersionView,
  type ModelFormat,
} from '../../shared/contracts/registry.js';
import { CliError } from '../client.js';
import { checked, connect, JSON_FLAG, keyValues, print, listCommand, readDocument } from '../context.js';
import { BenchmarkRunView } from '../../shared/contracts/benchmark.js';
import { z } from 'zod';
import { table } from '../table.js';

async function readManifest(path: string): Promise<Manifest> {
  return checked(Manifest, await readDocument(path), path);
}

/** The format a manifest's files suggest, when the operator names none. */
const formatOf = (manifest: Manifest): ModelFormat =>
  manifest.files.some((f) => f.path.endsWith('.gguf')) ? 'gguf' : manifest.files.some((f) => f.path.endsWith('.safetensors')) ? 'safetensors' : 'other';

/** The typed client's path parameters of a version's routes (`/models/{name}/versions/{version}/...`). */
const versionParams = (name: string, version: string) => ({ params: { path: { name, version } } });

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

function describeVersion(v: VersionView): string {
  const lines = [
    `model:       ${v.model} ${v.version} (${v.id})`,
    `state:       ${v.state}`,
    `format:      ${v.format}, ${v.fileCount} files, ${gib(v.totalBytes)}`,
    `licence:     ${v.licence ?? '-'}`,
    `provenance:  ${v.provenance ? [v.provenance.source, v.provenance.revision].filter(Boolean).join(' @ ') : '-'}`,
  ];
  const check = v.verification;
  if (check) {
    lines.push(
      `verified:    ${check.passed ? 'passed' : `FAILED (${check.problemCount} files)`}: ${check.files} files, ${check.bytes} bytes read, by ${check.by} at ${check.at}`,
    );
    for (const p of check.problems)
      lines.push(`  ${p.path}: ${p.problem.replace('_', ' ')} (expected ${p.expectedSize} bytes${p.actualSize === null ? '' : `, found ${p.actualSize}`})`);
  }
  if (v.evaluations.length) {
    lines.push(
      '',
      table(
        ['SUITE', 'RESULT', 'METRICS', 'BY', 'AT'],
        v.evaluations.map((e) => [
          e.suite,
          e.passed ? 'passed' : 'failed',
          Object.entries(e.metrics)
            .map(([k, n]) => `${k}=${n}`)
            .join(' ') || '-',
          e.recordedBy,
          e.at,
        ]),
      ),
    );
  }
  return lines.join('\n');
}

function describeModel(m: ModelDetail): string {
  const head = `${m.name} (${m.id})${m.description ? `: ${m.description}` : ''}`;
  if (!m.versions.length) return `${head}\nno versions yet`;
  return [
    head,
    '',
    table(
      ['VERSION', 'STATE', 'FORMAT', 'FILES', 'SIZE', 'UPDATED'],
      m.versions.map((v) => [v.version, v.state, v.format, String(v.fileCount), gib(v.totalBytes), v.updatedAt]),
    ),
  ].join('\n');
}

/** `--metric k=v`, repeated. */
const metricsOf = (pairs: readonly string[] | undefined): Record<string, number> =>
  keyValues('--metric', pairs, (text, pair) => {
    const value = Number(text);
    if (text.trim() === '' || !Number.isFinite(value)) throw new CliError(`--metric takes name=number, not ${pair}`, 2);
    return value;
  });

export function registerModels(program: Command): void {
  const models = program.command('models').description('the model registry: versions, evidence and their lifecycle');
  listCommand(program, models, {
    description: 'list models',
    path: '/models',
    item: ModelView,
    header: ['NAME', 'DESCRIPTION', 'CREATED', 'ID'],
    row: (m) => [m.name, m.description ?? '-', m.createdAt, m.id],
  });
  models
    .command('show <name> [version]')
    .description('a model and its versions, or one version: files, evidence, evaluations, state')
    .option(...JSON_FLAG)
    .action(async (name: string, version: string | undefined, opts: { json?: boolean }) => {
      const api = await connect(program);
      if (version === undefined) {
        const detail = await api.answer(api.http.GET('/models/{name}', { params: { path: { name } } }), ModelDetail);
        print(opts.json, detail, () => describeModel(detail));
      } else {
        const view = await api.answer(api.http.GET('/models/{name}/versions/{version}', versionParams(name, version)), VersionView);
        print(opts.json, view, () => describeVersion(view));
      }
    });
  models
    .command('create <name>')
    .description('create a model (operator)')
    .option('--description <text>', 'what it is')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { description?: string; json?: boolean }) => {
      const body = checked(CreateModelRequest, { name, ...(opts.description ? { description: opts.description } : {}) }, 'model');
      const api = await connect(program);
      const view = await api.answer(api.http.POST('/models', { body }), ModelView);
      print(opts.json, view, () => `${view.name}: created (${view.id})`);
    });
  models
    .command('register <name>')
    .description('register a candidate version from a manifest file (YAML or JSON: files with path, size, sha256)')
    .requiredOption('--version <version>', "the version's label (also its folder in the artifact store)")
    .requiredOption('-f, --file <file>', 'the manifest')
    .option('--format <format>', 'safetensors, gguf or other (default: from the files)')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { version: string; file: string; format?: string; json?: boolean }) => {
      const manifest = await readManifest(opts.file);
      const body = checked(RegisterVersionRequest, { version: opts.version, format: opts.format ?? formatOf(manifest), manifest }, 'version');
      const api = await connect(program);
      const view = await api.answer(api.http.POST('/models/{name}/versions', { params: { path: { name } }, body }), VersionView);
      print(opts.json, view, () => `${name} ${view.version}: registered as a ${view.state} (${view.fileCount} files, ${gib(view.totalBytes)})`);
    });
  models
    .command('provenance <name> <version>')
    .description("record a candidate's licence and provenance")
    .requiredOption('--licence <spdx>', 'its licence (SPDX)')
    .requiredOption('--source <source>', 'where the weights came from')
    .option('--revision <revision>', "the source's commit, tag or run")
    .option('--notes <text>', 'anything else')
    .option(...JSON_FLAG)
    .action(async (name: string, version: string, opts: { licence: string; source: string; revision?: string; notes?: string; json?: boolean }) => {
      const body = checked(
        RecordProvenanceRequest,
        { licence: opts.licence, provenance: { source: opts.source, revision: opts.revision, notes: opts.notes } },
        'provenance',
      );
      const api = await connect(program);
      const view = await api.answer(api.http.POST('/models/{name}/versions/{version}/provenance', { ...versionParams(name, version), body }), VersionView);
      print(opts.json, view, () => `${name} ${version}: ${view.state}`);
    });
  models
    .command('verify <name> <version>')
    .description("check every file of the version's folder in the artifact store (size, SHA-256); exit 4 when one does not match")
    .option(...JSON_FLAG)
    .action(async (name: string, version: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const view = await api.answer(api.http.POST('/models/{name}/versions/{version}/verify', versionParams(name, version)), VersionView);
      print(opts.json, view, () => describeVersion(view));
      if (!view.verification?.passed) process.exitCode = 4;
    });
  models
    .command('evaluate <name> <version>')
    .description("record an evaluation suite's result: a failed one rejects the version")
    .requiredOption('--suite <suite>', 'the suite that ran')
    .option('--passed', 'the suite passed')
    .option('--failed', 'the suite failed')
    .option('--metric <name=value...>', 'a number the run measured (repeatable)')
    .option('--notes <text>', 'anything else')
    .option(...JSON_FLAG)
    .action(
      async (name: string, version: string, opts: { suite: string; passed?: boolean; failed?: boolean; metric?: string[]; notes?: string; json?: boolean }) => {
        if (Boolean(opts.passed) === Boolean(opts.failed)) throw new CliError('say how the suite went: --passed or --failed', 2);
        const body = checked(
          RecordEvaluationRequest,
          { suite: opts.suite, passed: Boolean(opts.passed), metrics: metricsOf(opts.metric), notes: opts.notes },
          'evaluation',
        );
        const api = await connect(program);
        const view = await api.answer(api.http.POST('/models/{name}/versions/{version}/evaluations', { ...versionParams(name, version), body }), VersionView);
        print(opts.json, view, () => `${name} ${version}: ${view.state}`);
      },
    );
  for (const decision of ['approve', 'reject'] as const) {
    models
      .command(`${decision} <name> <version>`)
      .description(decision === 'approve' ? 'approve an evaluated version (admin)' : 'reject a version before its approval (admin)')
      .requiredOption('--reason <text>', 'why: it is audited')
      .option(...JSON_FLAG)
      .action(async (name: string, version: string, opts: { reason: string; json?: boolean }) => {
        const body = checked(ApprovalRequest, { decision, reason: opts.reason }, decision);
        const api = await connect(program);
        const view = await api.answer(api.http.POST('/models/{name}/versions/{version}/approval', { ...versionParams(name, version), body }), VersionView);
        print(opts.json, view, () => `${name} ${version}: ${view.state}`);
      });
  }
  models
    .command('benchmarks <name> <version>')
    .description("the version's benchmark gate runs and what each measured")
    .option(...JSON_FLAG)
    .action(async (name: string, version: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const { items } = await api.answer(
        api.http.GET('/models/{name}/versions/{version}/benchmarks', versionParams(name, version)),
        z.object({ items: z.array(BenchmarkRunView) }),
      );
      print(opts.json, items, () =>
        items.length === 0
          ? 'no gate runs yet'
          : table(
              ['RUN', 'PROFILE', 'RESULT', 'REQUESTS', 'ERRORS', 'TTFT P95 MS', 'TOKENS/S', 'HARDWARE', 'AT'],
              items.map((r) => [
                r.id,
                r.profile,
                r.passed ? 'passed' : 'failed',
                String(r.evidence.requests),
                String(r.evidence.errors),
                String(r.evidence.ttftMs.p95),
                String(r.evidence.tokensPerSecond.perRequestP50),
                r.evidence.hardware.map((h) => h.machine).join(','),
                r.createdAt,
              ]),
            ),
      );
    });
  models
    .command('promote <name> <version>')
    .description('promote a gated version (admin): the alias moves to it and its deployments roll onto it')
    .requiredOption('--alias <alias>', 'the alias to move')
    .requiredOption('--reason <text>', 'why: it is audited')
    .option(...JSON_FLAG)
    .action(async (name: string, version: string, opts: { alias: string; reason: string; json?: boolean }) => {
      const body = checked(PromoteRequest, { alias: opts.alias, reason: opts.reason }, 'promotion');
      const api = await connect(program);
      const result = await api.answer(api.http.POST('/models/{name}/versions/{version}/promotion', { ...versionParams(name, version), body }), PromotionResult);
      print(
        opts.json,
        result,
        () =>
          `${name} ${version}: ${result.version.state}; ${opts.alias} points at it${result.endedCanaries.length ? `; canary ended on ${result.endedCanaries.join(', ')}` : ''}`,
      );
    });
  models
    .command('release <name> <version>')
    .description('release a promoted version as stable after observing it (admin)')
    .requiredOption('--reason <text>', 'why: it is audited')
    .option(...JSON_FLAG)
    .action(async (name: string, version: string, opts: { reason: string; json?: boolean }) => {
      const body = checked(DecisionRequest, { reason: opts.reason }, 'release');
      const api = await connect(program);
      const view = await api.answer(api.http.POST('/models/{name}/versions/{version}/release', { ...versionParams(name, version), body }), VersionView);
      print(opts.json, view, () => `${name} ${version}: ${view.state}`);
    });
  models
    .command('rollback <name> <version>')
    .description('roll a version back for good (admin): its aliases move back one step and its canaries end')
    .requiredOption('--reason <text>', 'why: it is audited')
    .option(...JSON_FLAG)
    .action(async (name: string, version: string, opts: { reason: string; json?: boolean }) => {
      const body = checked(DecisionRequest, { reason: opts.reason }, 'rollback');
      const api = await connect(program);
      const result = await api.answer(api.http.POST('/models/{name}/versions/{version}/rollback', { ...versionParams(name, version), body }), RollbackResult);
      print(opts.json, result, () => `${name} ${version}: ${result.version.state}${result.aliases.length ? `; moved back: ${result.aliases.join(', ')}` : ''}`);
    });
}
