// Bundles the three deliverables into dist/: the Workers entry, the Node control plane and the single-file agent.
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as esbuild from 'esbuild';
import { readMigrationFiles } from 'drizzle-orm/migrator';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

// ESM output has no `require`; CJS dependencies bundled into it (pg, pino, commander...) still call it for
// Node built-ins, so give the module one.
const CREATE_REQUIRE_BANNER = "import { createRequire as __lnxCreateRequire } from 'node:module';\nconst require = __lnxCreateRequire(import.meta.url);";

/** Packages the Workers bundle must never contain: they need a filesystem, TCP or a Node server. */
const NOT_IN_WORKER = ['@electric-sql/pglite', 'pg', 'pg-pool', '@hono/node-server', 'drizzle-orm/pglite', 'drizzle-orm/node-postgres'];

const BUILTINS = new Set(builtinModules.filter((name) => !name.startsWith('_')));

/**
 * Node built-ins that workerd serves under `nodejs_compat` (checked against Miniflare 4.20251217 with
 * compatibility_date 2025-09-01). `node:cluster`, `node:v8`, `node:fs`, `node:os`, `node:perf_hooks` and
 * `node:worker_threads` are not among them: importing one stops the Worker from loading at all.
 */
const WORKERD_BUILTINS = new Set([
  'assert',
  'async_hooks',
  'buffer',
  'crypto',
  'diagnostics_channel',
  'dns',
  'events',
  'http',
  'https',
  'module',
  'net',
  'path',
  'process',
  'querystring',
  'stream',
  'string_decoder',
  'timers',
  'tls',
  'url',
  'util',
  'zlib',
]);

const builtinName = (path) => {
  const name = path.replace(/^node:/, '');
  return BUILTINS.has(name) || BUILTINS.has(name.split('/')[0]) ? name : undefined;
};

/**
 * Node built-ins inside the Workers bundle. ESM imports stay `node:*` externals (and fail the build when
 * workerd lacks them). CJS `require()` calls (only prom-client makes them) become esbuild's `__require`, which
 * throws in ESM unless a `require` is in scope, so workerBanner() declares one over static imports; a required
 * built-in workerd lacks becomes a stub that throws on first use, never at load.
 */
function workerBuiltins(required) {
  return {
    name: 'worker-node-builtins',
    setup(build) {
      build.onResolve({ filter: /^(node:)?[a-z0-9_/]+$/ }, (args) => {
        const name = builtinName(args.path);
        if (!name) return undefined;
        if (args.kind === 'require-call') required.add(name);
        else if (!WORKERD_BUILTINS.has(name)) {
          return { errors: [{ text: `node:${name} is not available in Workers (imported from ${relative(ROOT, args.importer)})` }] };
        }
        return { path: `node:${name}`, external: true };
      });
      // prom-client's index eagerly loads its default process metrics, and processStartTime.js calls
      // process.uptime() at load, which workerd lacks ("TypeError: process.uptime is not a function": the
      // Worker never starts). The Worker needs only the metric classes, so it gets them without that index.
      build.onResolve({ filter: /^prom-client$/ }, (args) => ({ path: args.path, namespace: 'worker-prom-client' }));
      build.onLoad({ filter: /.*/, namespace: 'worker-prom-client' }, () => ({
        contents: [
          "export { default as Registry } from 'prom-client/lib/registry';",
          "export { default as Counter } from 'prom-client/lib/counter';",
          "export { default as Gauge } from 'prom-client/lib/gauge';",
          "export { default as Histogram } from 'prom-client/lib/histogram';",
          "export { default as Summary } from 'prom-client/lib/summary';",
          'export function collectDefaultMetrics() {',
          "  throw new Error('prom-client default (process) metrics are not available in Workers');",
          '}',
        ].join('\n'),
        resolveDir: ROOT,
        loader: 'js',
      }));
      build.onResolve({ filter: /.*/ }, (args) => {
        const hit = NOT_IN_WORKER.find((name) => args.path === name || args.path.startsWith(`${name}/`));
        if (hit) return { errors: [{ text: `${args.path} must not be bundled into the Worker (imported from ${relative(ROOT, args.importer)})` }] };
        return undefined;
      });
    },
  };
}

/** The `require` the Worker bundle's CJS dependencies call, over the built-ins they asked for. */
function workerBanner(required) {
  const lines = [];
  const entries = [];
  [...required].sort().forEach((name, i) => {
    if (WORKERD_BUILTINS.has(name)) {
      lines.push(`import __lnxBuiltin${i} from 'node:${name}';`);
      entries.push(`  ${JSON.stringify(name)}: __lnxBuiltin${i},`);
    } else {
      entries.push(`  ${JSON.stringify(name)}: __lnxMissing(${JSON.stringify(name)}),`);
    }
  });
  return [
    ...lines,
    // prom-client times histograms with process.hrtime(), which workerd's `process` does not have (wrangler
    // would add it through unenv; this bundle is not built by wrangler). Workers advance performance.now()
    // only across I/O, which is what a reconcile duration is made of anyway.
    "if (globalThis.process && typeof globalThis.process.hrtime !== 'function') {",
    '  globalThis.process.hrtime = (previous) => {',
    '    const now = performance.now();',
    '    let seconds = Math.floor(now / 1000);',
    '    let nanos = Math.round((now % 1000) * 1e6);',
    '    if (previous) {',
    '      seconds -= previous[0];',
    '      nanos -= previous[1];',
    '      if (nanos < 0) { seconds -= 1; nanos += 1e9; }',
    '    }',
    '    return [seconds, nanos];',
    '  };',
    '}',
    'function __lnxMissing(name) {',
    '  return new Proxy({}, { get(_, key) { throw new Error(`node:${name} is not available in Workers (reading ${String(key)})`); } });',
    '}',
    'const __lnxBuiltins = {',
    ...entries,
    '};',
    'const require = (id) => {',
    "  const name = id.startsWith('node:') ? id.slice(5) : id;",
    '  if (name in __lnxBuiltins) return __lnxBuiltins[name];',
    '  throw new Error(`require(${id}) is not available in the Worker bundle`);',
    '};',
    '',
  ].join('\n');
}

/**
 * PGlite loads its WebAssembly and data files from beside its own module, so it stays outside the
 * control-plane bundle, and must not be loaded by a control plane on DATABASE_URL, which then runs from the
 * bundle alone. An ESM
 * import of an external package is hoisted to the bundle's top and loaded at start, so every import of PGlite
 * (ours and drizzle-orm/pglite's) becomes a CommonJS `require` instead, which runs only when the importing
 * module is first evaluated: node.ts imports the embedded store lazily, when no DATABASE_URL is given.
 */
function lazyPglite() {
  const NAME = '@electric-sql/pglite';
  return {
    name: 'lazy-pglite',
    setup(build) {
      build.onResolve({ filter: /^@electric-sql\/pglite$/ }, (args) =>
        args.namespace === 'lazy-pglite' ? { path: args.path, external: true } : { path: args.path, namespace: 'lazy-pglite' },
      );
      build.onLoad({ filter: /.*/, namespace: 'lazy-pglite' }, async () => {
        const version = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')).dependencies[NAME];
        const missing = `the embedded store needs ${NAME} where the control plane can resolve it (npm install ${NAME}@${version}); set DATABASE_URL to run on PostgreSQL without it`;
        return {
          contents: `try {
  module.exports = require(${JSON.stringify(NAME)});
} catch (error) {
  if (error?.code !== 'MODULE_NOT_FOUND') throw error;
  throw new Error(${JSON.stringify(missing)}, { cause: error });
}
`,
          loader: 'js',
        };
      });
    },
  };
}

/**
 * The committed SQL migrations inside the control-plane bundle, so that `control-plane.mjs` installed alone
 * (as the systemd unit does) still migrates its store. drizzle's migrators read the folder through its
 * `readMigrationFiles`; here that function returns what the same function read from the source tree at build
 * time (same statements, same hashes), and `migrationsFolder()` no longer looks for a folder.
 */
function embeddedMigrations() {
  const READER = /[\\/]node_modules[\\/]drizzle-orm[\\/]migrator\.js$/;
  const FOLDER = join(ROOT, 'functions/store/migrations-folder.js');
  return {
    name: 'embedded-migrations',
    setup(build) {
      // drizzle's own migrators import it relatively; the store's template names migrations by it (drizzle-orm/migrator).
      build.onResolve({ filter: /(^drizzle-orm\/migrator$)|([\\/]migrator\.js$)/ }, (args) =>
        args.path === 'drizzle-orm/migrator' || READER.test(resolve(args.resolveDir, args.path))
          ? { path: 'readMigrationFiles', namespace: 'embedded-migrations' }
          : undefined,
      );
      build.onResolve({ filter: /[\\/]migrations-folder\.js$/ }, (args) =>
        resolve(args.resolveDir, args.path) === FOLDER ? { path: 'migrationsFolder', namespace: 'embedded-migrations' } : undefined,
      );
      build.onLoad({ filter: /^readMigrationFiles$/, namespace: 'embedded-migrations' }, () => {
        const migrations = readMigrationFiles({ migrationsFolder: join(ROOT, 'functions/store/migrations') });
        return { contents: `export function readMigrationFiles() {\n  return ${JSON.stringify(migrations)};\n}\n`, loader: 'js' };
      });
      build.onLoad({ filter: /^migrationsFolder$/, namespace: 'embedded-migrations' }, () => ({
        contents: "export function migrationsFolder() {\n  return '(embedded in the bundle)';\n}\n",
        loader: 'js',
      }));
    },
  };
}

/** Each bundle's file in the output folder, under the name `build({ only })` selects it by. */
const BUNDLE_FILES = { worker: 'worker.mjs', 'control-plane': 'control-plane.mjs', agent: 'lunanexa-agent.mjs' };

/** @type {import('esbuild').BuildOptions} */
const COMMON = {
  bundle: true,
  format: 'esm',
  target: 'es2022',
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
  absWorkingDir: ROOT,
};

/**
 * Builds dist/worker.mjs, dist/control-plane.mjs and dist/lunanexa-agent.mjs.
 * Returns each bundle's path, size and gzipped size in bytes; throws on any esbuild error.
 * @param {{ outDir?: string, only?: Array<'worker' | 'control-plane' | 'agent'> }} [opts]
 */
export async function build(opts = {}) {
  const outDir = resolve(ROOT, opts.outDir ?? 'dist');
  const only = new Set(opts.only ?? Object.keys(BUNDLE_FILES));
  await mkdir(outDir, { recursive: true });
  const jobs = [];

  if (only.has('worker')) {
    jobs.push(
      (async () => {
        const required = new Set();
        const outfile = join(outDir, BUNDLE_FILES.worker);
        const result = await esbuild.build({
          ...COMMON,
          entryPoints: [join(ROOT, 'functions/hosts/worker.ts')],
          outfile,
          write: false,
          platform: 'browser',
          conditions: ['workerd', 'worker', 'browser'],
          mainFields: ['browser', 'module', 'main'],
          plugins: [workerBuiltins(required)],
        });
        const [output] = result.outputFiles;
        await writeFile(outfile, workerBanner(required) + output.text);
      })(),
    );
  }

  if (only.has('control-plane')) {
    jobs.push(
      (async () => {
        await esbuild.build({
          ...COMMON,
          entryPoints: [join(ROOT, 'functions/hosts/node.ts')],
          outfile: join(outDir, BUNDLE_FILES['control-plane']),
          platform: 'node',
          target: 'node20',
          banner: { js: CREATE_REQUIRE_BANNER },
          plugins: [lazyPglite(), embeddedMigrations()],
        });
      })(),
    );
  }

  if (only.has('agent')) {
    jobs.push(
      (async () => {
        const outfile = join(outDir, BUNDLE_FILES.agent);
        await esbuild.build({
          ...COMMON,
          entryPoints: [join(ROOT, 'agent/main.ts')],
          outfile,
          platform: 'node',
          target: 'node20',
          banner: { js: `#!/usr/bin/env node\n${CREATE_REQUIRE_BANNER}` },
        });
        // Installers copy it to /usr/local/bin as is.
        await chmod(outfile, 0o755);
      })(),
    );
  }

  await Promise.all(jobs);
  const outputs = {};
  for (const [key, file] of Object.entries(BUNDLE_FILES)) {
    if (!only.has(key)) continue;
    const path = join(outDir, file);
    outputs[key] = { path, bytes: (await stat(path)).size, gzipBytes: gzipSync(await readFile(path)).length };
  }
  return outputs;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const started = Date.now();
  const outputs = await build();
  const kib = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`.padStart(11);
  // Workers limit the compressed size (3 MiB free, 10 MiB paid), hence the gzip column.
  for (const { path, bytes, gzipBytes } of Object.values(outputs)) {
    console.log(`${relative(process.cwd(), path).padEnd(26)}${kib(bytes)}  (gzip${kib(gzipBytes)})`);
  }
  console.log(`built in ${Date.now() - started} ms`);
}
