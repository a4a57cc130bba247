// Bundles the three deliverables into dist/: the Workers entry, the Node control plane and the single-file agent.
import { cp, mkdir, rm, stat } from 'node:fs/promises';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as esbuild from 'esbuild';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

// ESM output has no `require`; CJS dependencies bundled into it (pg, pino, commander...) still call it for
// Node built-ins, so give the module one.
const CREATE_REQUIRE_BANNER = "import { createRequire as __lnxCreateRequire } from 'node:module';\nconst require = __lnxCreateRequire(import.meta.url);";

/** Packages the Workers bundle must never contain: they need a filesystem, TCP or a Node server. */
const NOT_IN_WORKER = ['@electric-sql/pglite', 'pg', 'pg-pool', '@hono/node-server', 'drizzle-orm/pglite', 'drizzle-orm/node-postgres'];

const BUILTINS = new Set(builtinModules.filter((name) => !name.startsWith('_')));

/**
 * Node built-ins inside the Workers bundle. `nodejs_compat` serves `node:*` imports, but a CJS dependency's
 * `require('buffer')` would become esbuild's throwing dynamic-require stub in ESM output. Each built-in is
 * therefore routed through a tiny ESM module that imports `node:<name>` statically, which esbuild can then
 * hand to `require` as a namespace. Built-ins workerd does not have are reported by Miniflare at load time.
 */
function workerBuiltins() {
  return {
    name: 'worker-node-builtins',
    setup(build) {
      build.onResolve({ filter: /^(node:)?[a-z_/]+$/ }, (args) => {
        const name = args.path.replace(/^node:/, '');
        if (!BUILTINS.has(name) && !BUILTINS.has(name.split('/')[0])) return undefined;
        if (args.kind === 'import-statement' || args.kind === 'dynamic-import') return { path: `node:${name}`, external: true };
        return { path: name, namespace: 'node-builtin' };
      });
      build.onLoad({ filter: /.*/, namespace: 'node-builtin' }, (args) => ({
        contents: `import * as m from 'node:${args.path}'; export default (m.default ?? m); export * from 'node:${args.path}';`,
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

/** @type {import('esbuild').BuildOptions} */
const COMMON = {
  bundle: true,
  format: 'esm',
  target: 'es2022',
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
  absWorkingDir: ROOT,
  metafile: true,
};

/**
 * Builds dist/worker.mjs, dist/control-plane.mjs (+ dist/migrations/) and dist/lunanexa-agent.mjs.
 * Returns each bundle's path and size in bytes; throws on any esbuild error.
 * @param {{ outDir?: string, only?: Array<'worker' | 'control-plane' | 'agent'> }} [opts]
 */
export async function build(opts = {}) {
  const outDir = resolve(ROOT, opts.outDir ?? 'dist');
  const only = new Set(opts.only ?? ['worker', 'control-plane', 'agent']);
  await mkdir(outDir, { recursive: true });
  const jobs = [];

  if (only.has('worker')) {
    jobs.push(
      esbuild.build({
        ...COMMON,
        entryPoints: [join(ROOT, 'functions/worker.ts')],
        outfile: join(outDir, 'worker.mjs'),
        platform: 'browser',
        conditions: ['workerd', 'worker', 'browser'],
        mainFields: ['browser', 'module', 'main'],
        plugins: [workerBuiltins()],
      }),
    );
  }

  if (only.has('control-plane')) {
    jobs.push(
      (async () => {
        const result = await esbuild.build({
          ...COMMON,
          entryPoints: [join(ROOT, 'functions/node.ts')],
          outfile: join(outDir, 'control-plane.mjs'),
          platform: 'node',
          target: 'node20',
          banner: { js: CREATE_REQUIRE_BANNER },
          // PGlite finds its .wasm and .data files beside its own module; bundling it would lose them, and it is
          // a regular dependency wherever the control plane is installed.
          external: ['@electric-sql/pglite'],
        });
        // migrations-folder.ts resolves ./migrations/ beside the running module, i.e. beside the bundle.
        await rm(join(outDir, 'migrations'), { recursive: true, force: true });
        await cp(join(ROOT, 'functions/store/migrations'), join(outDir, 'migrations'), { recursive: true });
        return result;
      })(),
    );
  }

  if (only.has('agent')) {
    jobs.push(
      esbuild.build({
        ...COMMON,
        entryPoints: [join(ROOT, 'agent/main.ts')],
        outfile: join(outDir, 'lunanexa-agent.mjs'),
        platform: 'node',
        target: 'node20',
        banner: { js: `#!/usr/bin/env node\n${CREATE_REQUIRE_BANNER}` },
      }),
    );
  }

  await Promise.all(jobs);
  const names = { worker: 'worker.mjs', 'control-plane': 'control-plane.mjs', agent: 'lunanexa-agent.mjs' };
  const outputs = {};
  for (const [key, file] of Object.entries(names)) {
    if (!only.has(key)) continue;
    const path = join(outDir, file);
    outputs[key] = { path, bytes: (await stat(path)).size };
  }
  return outputs;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const started = Date.now();
  const outputs = await build();
  for (const { path, bytes } of Object.values(outputs)) {
    console.log(`${relative(process.cwd(), path).padEnd(28)} ${(bytes / 1024).toFixed(1).padStart(8)} KiB`);
  }
  console.log(`built in ${Date.now() - started} ms`);
}
