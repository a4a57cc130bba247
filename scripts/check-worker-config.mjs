// What `wrangler deploy --dry-run` does not check, checked offline against the config wrangler resolves: each
// environment's Durable Object classes (bindings and [[migrations]]) are exported by the bundle it would upload
// (with no_bundle, wrangler never reads the bundle's exports, and Cloudflare refuses the upload only at deploy
// time), production runs the cron trigger and preview does not (an environment inherits `triggers`).
//
//   node scripts/check-worker-config.mjs [bundle]     # default dist/worker.mjs (npm run build)
//
// Exit code 1, with one line per problem, when a check fails.
import { resolve } from 'node:path';
import * as esbuild from 'esbuild';
import { unstable_readConfig } from 'wrangler';

const bundle = resolve(process.argv[2] ?? 'dist/worker.mjs');

/** The bundle's export names, read by esbuild without bundling or running it (`cloudflare:*` imports stay as they are). */
async function exportsOf(path) {
  const result = await esbuild.build({ entryPoints: [path], bundle: false, write: false, metafile: true, format: 'esm', outdir: 'unused', logLevel: 'silent' });
  return new Set(Object.values(result.metafile.outputs).flatMap((output) => output.exports));
}

const exported = await exportsOf(bundle);
const problems = [];
const ENVIRONMENTS = [
  { label: 'production', env: undefined, cron: true },
  { label: 'preview', env: 'preview', cron: false },
];

for (const { label, env, cron } of ENVIRONMENTS) {
  const config = unstable_readConfig({ config: 'wrangler.toml', env }, { hideWarnings: true });
  // A binding with script_name points at another Worker's class; only this Worker's own must be exported here.
  const bound = config.durable_objects.bindings.filter((b) => !b.script_name).map((b) => b.class_name);
  const migrated = config.migrations.flatMap((m) => [...(m.new_classes ?? []), ...(m.new_sqlite_classes ?? [])]);
  const deleted = new Set(config.migrations.flatMap((m) => m.deleted_classes ?? []));
  for (const name of new Set([...bound, ...migrated.filter((n) => !deleted.has(n))])) {
    if (!exported.has(name)) problems.push(`${label} (${config.name}): Durable Object class ${name} is not exported by ${bundle}`);
  }
  const crons = config.triggers.crons ?? [];
  if (cron && crons.length === 0) problems.push(`${label} (${config.name}): no cron trigger: the reconcile tick would never run`);
  if (!cron && crons.length > 0)
    problems.push(`${label} (${config.name}): cron trigger ${crons.join(', ')} is set (environments inherit triggers; set crons = [])`);
  console.log(`${label} (${config.name}): Durable Objects ${[...new Set(bound)].join(', ') || 'none'}; crons ${crons.join(', ') || 'none'}`);
}

if (problems.length) {
  for (const problem of problems) console.error(problem);
  process.exit(1);
}
console.log(`wrangler.toml and ${bundle} agree`);
