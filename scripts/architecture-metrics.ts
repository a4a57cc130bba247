// The numbers behind "the house in order" (issue 18): how functions/ is laid out and how its folders depend on
// one another, measured on any checkout of this repository, so the old layout and the new one can be compared.
//
//   node --import tsx scripts/architecture-metrics.ts [--root DIR]...       # static measures, one column per root
//   node --import tsx scripts/architecture-metrics.ts --request-path [--root DIR]
//   node --import tsx scripts/architecture-metrics.ts --check    # exits 1 on a folder cycle at any depth (CI)
//
// Static measures (read with the TypeScript compiler's parser, nothing is type-checked or run):
//   1. folders under functions/: every depth, those holding source files, and the first level;
//   2. folder-level import cycles in functions/ and agent/: strongly connected components of the graph whose nodes
//      are the first-level folders (each top-level file its own node), and of the graph whose nodes are every
//      directory at every depth; edges are relative imports of any kind (`import`, `import type`, `export from`,
//      `import()`), `.js` specifiers resolved to the `.ts` sources;
//   3. upward imports: the import statements on the edges that a greedy feedback arc set (Eades, Lin and Smyth
//      1993, each edge weighted by its number of import statements, run inside each component) removes to make
//      the first-level graph acyclic; an upper bound on the minimum, not the minimum itself;
//   4. the longest functions in functions/, agent/, cli/ and shared/: declarations, methods, accessors,
//      constructors, and arrow functions or function expressions bound to a name, from first token to last.
// Dynamic measure (--request-path):
//   5. the files of functions/ and shared/ whose code runs in the control plane during one plain and one
//      streaming chat completion, by V8's precise coverage: an in-process plane on PGlite, as the tests start one,
//      with one simulated node (the agent and its runtime are processes of their own, so their files never count).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';

const SOURCE = /\.(ts|tsx|mts|cts)$/;
const DECLARATION = /\.d\.(ts|mts|cts)$/;

// ---------------------------------------------------------------------------------------------------------
// Files and imports

/** Posix-style path of `path` relative to `root`. */
const rel = (root: string, path: string) => relative(root, path).split(sep).join('/');

/** Every directory under `dir` (not `dir` itself) and every source file, recursively. */
function walk(dir: string): { dirs: string[]; files: string[] } {
  const dirs: string[] = [];
  const files: string[] = [];
  const visit = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) {
        if (entry.name === 'node_modules') continue;
        dirs.push(path);
        visit(path);
      } else if (SOURCE.test(entry.name) && !DECLARATION.test(entry.name)) files.push(path);
    }
  };
  if (existsSync(dir)) visit(dir);
  return { dirs, files };
}

const parsed = new Map<string, ts.SourceFile>();
function parse(file: string): ts.SourceFile {
  let source = parsed.get(file);
  if (!source) {
    source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true, file.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
    parsed.set(file, source);
  }
  return source;
}

/** The module specifiers of every import in `file`: static, type-only, re-exports, `import()` and `import('x').T`. */
function specifiers(file: string): string[] {
  const out: string[] = [];
  const visit = (node: ts.Node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      out.push(node.moduleSpecifier.text);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      out.push(node.moduleReference.expression.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      out.push(node.arguments[0].text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      out.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(parse(file));
  return out;
}

/** The source file a relative specifier names (`./x.js` is `./x.ts`), or null for packages and non-source files. */
function resolveImport(from: string, specifier: string, known: Set<string>): string | null {
  if (!specifier.startsWith('.')) return null;
  const base = resolve(dirname(from), specifier);
  const stem = base.replace(/\.(js|jsx|mjs|cjs)$/, '');
  const candidates = [base, `${stem}.ts`, `${stem}.tsx`, `${stem}.mts`, `${stem}.cts`, join(base, 'index.ts'), join(base, 'index.tsx')];
  return candidates.find((c) => known.has(c)) ?? null;
}

// ---------------------------------------------------------------------------------------------------------
// Folder graphs

interface Edge {
  imports: number;
  files: Set<string>;
}
type Graph = { nodes: Set<string>; edges: Map<string, Map<string, Edge>> };

/**
 * The folder graph of the source tree at `dir`. `first`: nodes are first-level folders; `all`: nodes are every
 * directory. In both, a file directly in `dir` is a node of its own.
 */
function folderGraph(dir: string, level: 'first' | 'all'): Graph {
  const { files } = walk(dir);
  const known = new Set(files);
  const nodeOf = (file: string) => {
    const parts = rel(dir, file).split('/');
    if (parts.length === 1) return parts[0]!;
    return level === 'first' ? `${parts[0]}/` : `${parts.slice(0, -1).join('/')}/`;
  };
  const graph: Graph = { nodes: new Set(files.map(nodeOf)), edges: new Map() };
  for (const file of files) {
    const from = nodeOf(file);
    for (const specifier of specifiers(file)) {
      const target = resolveImport(file, specifier, known);
      if (!target) continue;
      const to = nodeOf(target);
      if (to === from) continue;
      const out = graph.edges.get(from) ?? new Map<string, Edge>();
      graph.edges.set(from, out);
      const edge = out.get(to) ?? { imports: 0, files: new Set<string>() };
      out.set(to, edge);
      edge.imports += 1;
      edge.files.add(rel(dir, file));
    }
  }
  return graph;
}

/** Strongly connected components (Tarjan), each sorted, largest first. */
function components(graph: Graph): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const connect = (v: string) => {
    index.set(v, counter);
    low.set(v, counter);
    counter += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of [...(graph.edges.get(v)?.keys() ?? [])].sort()) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      for (;;) {
        const w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
        if (w === v) break;
      }
      out.push(component.sort());
    }
  };
  for (const v of [...graph.nodes].sort()) if (!index.has(v)) connect(v);
  return out.sort((a, b) => b.length - a.length || a[0]!.localeCompare(b[0]!));
}

/**
 * Eades-Lin-Smyth: an order of `nodes` with few (weighted) edges pointing backwards. Sinks go to the end, sources
 * to the front, and otherwise the node with the largest outgoing minus incoming weight goes to the front.
 */
function greedyOrder(graph: Graph, nodes: string[]): string[] {
  const left = new Set(nodes);
  const weight = (from: string, to: string) => graph.edges.get(from)?.get(to)?.imports ?? 0;
  const outW = (v: string) => [...left].reduce((n, w) => (w === v ? n : n + weight(v, w)), 0);
  const inW = (v: string) => [...left].reduce((n, w) => (w === v ? n : n + weight(w, v)), 0);
  const head: string[] = [];
  const tail: string[] = [];
  while (left.size > 0) {
    let moved = true;
    while (moved) {
      moved = false;
      for (const v of [...left].sort()) {
        if (outW(v) === 0) {
          tail.unshift(v);
          left.delete(v);
          moved = true;
        } else if (inW(v) === 0) {
          head.push(v);
          left.delete(v);
          moved = true;
        }
      }
    }
    if (left.size === 0) break;
    const best = [...left].sort().reduce((a, b) => (outW(b) - inW(b) > outW(a) - inW(a) ? b : a));
    head.push(best);
    left.delete(best);
  }
  return [...head, ...tail];
}

/**
 * An order of `nodes` whose backward edges weigh the least there is: dynamic programming over the subsets placed
 * first (the node placed after a set pays for its edges into that set). 2^n states: for components up to
 * EXACT_LIMIT nodes.
 */
function exactOrder(graph: Graph, nodes: string[]): string[] {
  const n = nodes.length;
  const weight = nodes.map((from) => nodes.map((to) => graph.edges.get(from)?.get(to)?.imports ?? 0));
  const best = new Float64Array(1 << n).fill(Number.POSITIVE_INFINITY);
  const last = new Int8Array(1 << n).fill(-1);
  best[0] = 0;
  for (let set = 0; set < 1 << n; set += 1) {
    if (best[set] === Number.POSITIVE_INFINITY) continue;
    for (let v = 0; v < n; v += 1) {
      if (set & (1 << v)) continue;
      let cost = best[set]!;
      for (let u = 0; u < n; u += 1) if (set & (1 << u)) cost += weight[v]![u]!;
      const next = set | (1 << v);
      if (cost < best[next]!) {
        best[next] = cost;
        last[next] = v;
      }
    }
  }
  const order: string[] = [];
  for (let set = (1 << n) - 1; set !== 0; set &= ~(1 << last[set]!)) order.unshift(nodes[last[set]!]!);
  return order;
}

const EXACT_LIMIT = 16;

interface Backward {
  from: string;
  to: string;
  imports: number;
  files: Set<string>;
}

interface GraphMetrics {
  graph: Graph;
  nodes: number;
  edges: number;
  cyclic: string[][];
  /** Backward edges of the exact minimum order, or of the greedy one where a component is too large (`exact` false). */
  backward: Backward[];
  exact: boolean;
  /** Backward edges of the Eades-Lin-Smyth order. */
  greedy: Backward[];
}

/** The edges inside the components that point backwards in the order `orderOf` gives each component. */
function backwardEdges(graph: Graph, cyclic: string[][], orderOf: (component: string[]) => string[]): Backward[] {
  const backward: Backward[] = [];
  for (const component of cyclic) {
    const position = new Map(orderOf(component).map((v, i) => [v, i]));
    for (const from of component) {
      for (const [to, edge] of graph.edges.get(from) ?? []) {
        if (position.has(to) && position.get(to)! < position.get(from)!) backward.push({ from, to, ...edge });
      }
    }
  }
  return backward.sort((a, b) => b.imports - a.imports || a.from.localeCompare(b.from) || a.to.localeCompare(b.to));
}

function graphMetrics(graph: Graph): GraphMetrics {
  const cyclic = components(graph).filter((c) => c.length > 1);
  const exact = cyclic.every((c) => c.length <= EXACT_LIMIT);
  const greedy = backwardEdges(graph, cyclic, (c) => greedyOrder(graph, c));
  const backward = exact ? backwardEdges(graph, cyclic, (c) => exactOrder(graph, c)) : greedy;
  const edges = [...graph.edges.values()].reduce((n, out) => n + out.size, 0);
  return { graph, nodes: graph.nodes.size, edges, cyclic, backward, exact, greedy };
}

// ---------------------------------------------------------------------------------------------------------
// Longest functions

interface FunctionSize {
  file: string;
  name: string;
  line: number;
  lines: number;
  /** Characters other than whitespace: unlike lines, the same before and after a formatter rewraps the code. */
  chars: number;
}

const nameText = (name: ts.PropertyName | ts.BindingName | undefined): string | null => {
  if (!name) return null;
  if (ts.isIdentifier(name) || ts.isPrivateIdentifier(name) || ts.isStringLiteral(name) || ts.isNumericLiteral(name)) return name.text;
  return name.getText();
};

/** The name an object literal or class that holds `node` goes by, for `Owner.member`. */
function ownerName(node: ts.Node): string | null {
  const parent = node.parent;
  if (ts.isClassLike(parent)) return parent.name?.text ?? '(class)';
  if (ts.isObjectLiteralExpression(parent)) {
    const holder = parent.parent;
    if (ts.isVariableDeclaration(holder) || ts.isPropertyAssignment(holder)) return nameText(holder.name);
    return null;
  }
  return null;
}

const qualified = (node: ts.Node, member: string | null) => {
  if (member === null) return null;
  const owner = ownerName(node);
  return owner ? `${owner}.${member}` : member;
};

/** The name a function node goes by, or null for an anonymous one (a callback passed inline). */
function functionName(node: ts.Node): string | null {
  if (ts.isFunctionDeclaration(node)) return node.name?.text ?? 'default';
  if (ts.isConstructorDeclaration(node)) return qualified(node, 'constructor');
  if (ts.isMethodDeclaration(node) || ts.isGetAccessorDeclaration(node) || ts.isSetAccessorDeclaration(node)) return qualified(node, nameText(node.name));
  if (ts.isArrowFunction(node) || ts.isFunctionExpression(node)) {
    let holder: ts.Node = node.parent;
    while (ts.isParenthesizedExpression(holder) || ts.isAsExpression(holder) || ts.isSatisfiesExpression(holder)) holder = holder.parent;
    if (ts.isVariableDeclaration(holder)) return nameText(holder.name);
    if (ts.isPropertyDeclaration(holder) || ts.isPropertyAssignment(holder)) return qualified(holder, nameText(holder.name));
    if (ts.isBinaryExpression(holder) && holder.operatorToken.kind === ts.SyntaxKind.EqualsToken) return holder.left.getText();
    if (ts.isFunctionExpression(node) && node.name) return node.name.text;
    return null;
  }
  return null;
}

function functionSizes(root: string, dirs: string[]): FunctionSize[] {
  const out: FunctionSize[] = [];
  for (const dir of dirs) {
    for (const file of walk(join(root, dir)).files) {
      const source = parse(file);
      const visit = (node: ts.Node) => {
        if (ts.isFunctionLike(node) && 'body' in node && node.body) {
          const name = functionName(node);
          if (name !== null) {
            const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
            const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
            out.push({
              file: rel(root, file),
              name,
              line: start + 1,
              lines: end - start + 1,
              chars: source.text.slice(node.getStart(source), node.getEnd()).replace(/\s/g, '').length,
            });
          }
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
  }
  return out.sort((a, b) => b.lines - a.lines || a.file.localeCompare(b.file) || a.line - b.line);
}

// ---------------------------------------------------------------------------------------------------------
// Static report

interface StaticMetrics {
  root: string;
  folders: { all: number; withSource: number; withSourceOutsideSchemaMigrations: number; firstLevel: number; topLevelFiles: number };
  graphs: Record<string, GraphMetrics>;
  longest: FunctionSize[];
}

const GRAPHS = [
  { key: 'functions, first level', dir: 'functions', level: 'first' },
  { key: 'functions, every depth', dir: 'functions', level: 'all' },
  { key: 'agent, first level', dir: 'agent', level: 'first' },
  { key: 'agent, every depth', dir: 'agent', level: 'all' },
] as const;

function staticMetrics(root: string): StaticMetrics {
  const functions = join(root, 'functions');
  const { dirs, files } = walk(functions);
  const holding = new Set(files.map((f) => dirname(f)));
  holding.delete(functions);
  const excluded = /^(store\/schema|store\/migrations)(\/|$)/;
  const graphs: Record<string, GraphMetrics> = {};
  for (const g of GRAPHS) graphs[g.key] = graphMetrics(folderGraph(join(root, g.dir), g.level));
  return {
    root,
    folders: {
      all: dirs.length,
      withSource: holding.size,
      withSourceOutsideSchemaMigrations: [...holding].filter((d) => !excluded.test(rel(functions, d))).length,
      firstLevel: readdirSync(functions, { withFileTypes: true }).filter((e) => e.isDirectory()).length,
      topLevelFiles: files.filter((f) => dirname(f) === functions).length,
    },
    graphs,
    longest: functionSizes(root, ['functions', 'agent', 'cli', 'shared']),
  };
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  return [line(header), `|${widths.map((w, i) => (i === 0 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`, ...rows.map(line)].join('\n');
}

function printStatic(all: StaticMetrics[]) {
  const column = (f: (m: StaticMetrics) => string | number) => all.map((m) => String(f(m)));
  const rows: string[][] = [
    ['1. folders under functions/, every depth', ...column((m) => m.folders.all)],
    ['   ... holding source files', ...column((m) => m.folders.withSource)],
    ['   ... holding source files, store/schema and store/migrations left out', ...column((m) => m.folders.withSourceOutsideSchemaMigrations)],
    ['   first-level folders (+ files directly in functions/)', ...column((m) => `${m.folders.firstLevel} (+${m.folders.topLevelFiles})`)],
  ];
  for (const g of GRAPHS) {
    rows.push([`2. ${g.key}: cycles (SCCs > 1 node), nodes`, ...column((m) => `${m.graphs[g.key]!.cyclic.length}, ${m.graphs[g.key]!.nodes}`)]);
    rows.push([`   ${g.key}: largest cycle`, ...column((m) => `${m.graphs[g.key]!.cyclic[0]?.length ?? 0} of ${m.graphs[g.key]!.nodes}`)]);
    rows.push([`   ${g.key}: nodes in any cycle`, ...column((m) => m.graphs[g.key]!.cyclic.reduce((n, c) => n + c.length, 0))]);
  }
  const summary = (back: Backward[]) => `${back.reduce((n, b) => n + b.imports, 0)} / ${new Set(back.flatMap((b) => [...b.files])).size} / ${back.length}`;
  for (const g of GRAPHS.filter((x) => x.level === 'first')) {
    rows.push([
      `3. ${g.key}: upward imports, minimum FAS: imports / files / edges`,
      ...column((m) => `${summary(m.graphs[g.key]!.backward)}${m.graphs[g.key]!.exact ? '' : ' (greedy)'}`),
    ]);
    rows.push([`   ${g.key}: upward imports, Eades-Lin-Smyth greedy FAS`, ...column((m) => summary(m.graphs[g.key]!.greedy))]);
  }
  const top = (m: StaticMetrics) => m.longest[0];
  rows.push(['4. longest function (lines)', ...column((m) => `${top(m)?.lines ?? 0} ${top(m)?.name ?? ''}`)]);
  rows.push(['   functions of 100 lines or more', ...column((m) => m.longest.filter((f) => f.lines >= 100).length)]);
  const byChars = (m: StaticMetrics) => [...m.longest].sort((a, b) => b.chars - a.chars)[0];
  rows.push(['   largest function (non-blank characters)', ...column((m) => `${byChars(m)?.chars ?? 0} ${byChars(m)?.name ?? ''}`)]);
  rows.push(['   functions of 4,000 non-blank characters or more', ...column((m) => m.longest.filter((f) => f.chars >= 4_000).length)]);
  console.log(table(['measure', ...all.map((m) => m.root)], rows));

  for (const m of all) {
    console.log(`\n## ${m.root}`);
    for (const g of GRAPHS) {
      const gm = m.graphs[g.key]!;
      console.log(`\n${g.key}: ${gm.nodes} nodes, ${gm.edges} folder edges; ${gm.cyclic.length} cycle(s)`);
      for (const c of gm.cyclic) {
        console.log(`  cycle of ${c.length}: ${c.join(' ')}`);
        if (g.level !== 'first') continue;
        const inside = c.flatMap((from) =>
          [...(gm.graph.edges.get(from) ?? [])].filter(([to]) => c.includes(to)).map(([to, e]) => `${from}->${to} ${e.imports}`),
        );
        console.log(`    edges inside (import statements): ${inside.join(', ')}`);
      }
      if (g.level === 'first' && gm.backward.length > 0) {
        const method = gm.exact ? 'minimum feedback arc set, exact' : 'Eades-Lin-Smyth greedy feedback arc set';
        console.log(`  upward edges (${method}, inside each cycle, weighted by import statements):`);
        for (const b of gm.backward)
          console.log(`    ${b.from} -> ${b.to}: ${b.imports} import(s) in ${b.files.size} file(s): ${[...b.files].sort().join(', ')}`);
      }
    }
    console.log('\nlongest functions in functions/, agent/, cli/, shared/:');
    console.log(
      table(
        ['file', 'function', 'line', 'lines', 'non-blank chars'],
        m.longest.slice(0, 10).map((f) => [f.file, f.name, String(f.line), String(f.lines), String(f.chars)]),
      ),
    );
  }
}

// ---------------------------------------------------------------------------------------------------------
// The files an inference request crosses

interface PlaneHelpers {
  startTestPlane(opts: { config?: Record<string, unknown> }): Promise<{ url: string; adminToken: string; dataDir: string; stop(): Promise<void> }>;
}
interface FleetHelpers {
  seedDemoDeployment(plane: unknown, replicas: number, runtime?: { loadMs?: number }): Promise<unknown>;
  startSimNode(plane: unknown, name: string, rootDir: string): Promise<{ logFile: string }>;
  stopSimNodes(nodes: unknown[]): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const progress = (what: string) => process.stderr.write(`[request-path] ${what}\n`);

/** Hit files (absolute paths) of one precise-coverage snapshot: any function with a call count above zero. */
function hitFiles(coverage: { result: Array<{ url: string; functions: Array<{ ranges: Array<{ count: number }> }> }> }): Set<string> {
  const out = new Set<string>();
  for (const script of coverage.result) {
    if (!script.url.startsWith('file://')) continue;
    if (script.functions.some((f) => (f.ranges[0]?.count ?? 0) > 0)) out.add(fileURLToPath(script.url));
  }
  return out;
}

/**
 * Production-like intervals rather than the tests' fast ones, so that few background ticks (heartbeats, pings,
 * lease renewals, routing refreshes, reconciles) fall into a window of a few hundred milliseconds.
 */
const QUIET = {
  heartbeatIntervalMs: 10_000,
  machineLifetimeMs: 60_000,
  runtimeTtlMs: 60_000,
  runtimeGraceMs: 15_000,
  streamKeepAliveMs: 10_000,
  streamLeaseTtlMs: 45_000,
  instanceLeaseTtlMs: 30_000,
  streamPingMs: 10_000,
  streamPingTimeoutMs: 30_000,
  routingRefreshMs: 5_000,
  reconcileIntervalMs: 5_000,
};

/** Measured windows of each kind. */
const WINDOWS = 7;
/** The window that catches everything the background runs: longer than QUIET's longest interval. */
const BACKGROUND_MS = 12_000;

async function requestPath(root: string) {
  const inScope = (f: string) => {
    const r = rel(root, f);
    return r.startsWith('functions/') || r.startsWith('shared/');
  };
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  // Started before the plane's modules load, so every function of theirs keeps exact counts.
  await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
  const snapshot = async () => hitFiles(await session.post('Profiler.takePreciseCoverage'));

  const helper = (...candidates: string[]) => {
    const found = candidates.map((c) => join(root, c)).find((p) => existsSync(p));
    if (!found) throw new Error(`none of ${candidates.join(', ')} under ${root}`);
    return pathToFileURL(found).href;
  };
  const planes = (await import(helper('test/helpers/plane.ts'))) as PlaneHelpers;
  const fleet = (await import(helper('functions/hosts/dev/fleet.ts', 'functions/dev/fleet.ts'))) as FleetHelpers;

  progress('starting the plane');
  const plane = await planes.startTestPlane({ config: QUIET });
  let node: { logFile: string } | undefined;
  try {
    await fleet.seedDemoDeployment(plane, 1, { loadMs: 100 });
    progress(`plane at ${plane.url}; starting a simulated node`);
    node = await fleet.startSimNode(plane, 'metrics-node', join(plane.dataDir, 'nodes'));
    progress(`node started, its log ${node.logFile}; waiting for a first answer`);
    const chat = async (stream: boolean) => {
      const response = await fetch(`${plane.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hello there' }], stream, max_tokens: 8 }),
        signal: AbortSignal.timeout(30_000),
      });
      const body = await response.text();
      return { status: response.status, body };
    };
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { status, body } = await chat(false);
      if (status === 200) break;
      if (Date.now() > deadline) throw new Error(`no 200 from /v1/chat/completions within 120 s: ${status} ${body}; see ${node.logFile}`);
      await sleep(250);
    }
    for (let i = 0; i < 3; i += 1) for (const stream of [false, true]) if ((await chat(stream)).status !== 200) throw new Error('warm-up request failed');
    progress('warmed up; measuring');
    await sleep(500);

    // One request per window. What else runs in the plane meanwhile (a heartbeat, a reconcile, a lease renewal)
    // lands in some windows and not others, so the request's path is what every window of its kind hit; idle
    // windows as long as a request show what the background alone hits.
    interface Window {
      ms: number;
      files: Set<string>;
    }
    const windows = async (what: (() => Promise<void>) | number): Promise<Window[]> => {
      const out: Window[] = [];
      for (let i = 0; i < WINDOWS; i += 1) {
        // A random gap: the agent reports a change of its load (a heartbeat, at most every 250 ms) when a request
        // starts and ends, and a gap in step with that would put its report into every window.
        await sleep(150 + Math.random() * 600);
        await snapshot(); // resets the counters
        const began = performance.now();
        if (typeof what === 'number') await sleep(what);
        else await what();
        const files = await snapshot();
        out.push({ ms: performance.now() - began, files: new Set([...files].filter(inScope).map((f) => rel(root, f))) });
      }
      return out;
    };
    const one = (stream: boolean) => async () => {
      const { status, body } = await chat(stream);
      if (status !== 200) throw new Error(`measured request failed: ${status} ${body}`);
      if (stream && !body.includes('[DONE]')) throw new Error('measured stream did not end with [DONE]');
    };
    const plain = await windows(one(false));
    const streaming = await windows(one(true));
    const every = (ws: Window[]) => [...ws[0]!.files].filter((f) => ws.every((w) => w.files.has(f))).sort();
    const any = (ws: Window[]) => [...new Set(ws.flatMap((w) => [...w.files]))].sort();
    const median = (ws: Window[]) => ws.map((w) => w.ms).sort((x, y) => x - y)[Math.floor(ws.length / 2)]!;
    const idle = await windows(Math.round(Math.max(median(plain), median(streaming))));
    // All the background does: one window longer than its longest interval (QUIET's 10 s).
    await snapshot();
    await sleep(BACKGROUND_MS);
    const background = new Set([...(await snapshot())].filter(inScope).map((f) => rel(root, f)));
    for (const f of any(idle)) background.add(f);

    /** Folders of functions/ holding `files`, first-level or every depth; files directly in functions/ apart. */
    const folders = (files: string[], depth: 'first' | 'all') =>
      new Set(
        files
          .filter((f) => f.split('/').length > 2 && f.startsWith('functions/'))
          .map((f) => (depth === 'first' ? f.split('/').slice(0, 2).join('/') : dirname(f))),
      );
    const describe = (files: string[]) => {
      const top = files.filter((f) => f.split('/').length === 2 && f.startsWith('functions/')).length;
      const plus = top > 0 ? ` (+${top})` : '';
      return [
        String(files.filter((f) => f.startsWith('functions/')).length),
        String(files.filter((f) => f.startsWith('shared/')).length),
        `${folders(files, 'first').size}${plus}`,
        `${folders(files, 'all').size}${plus}`,
      ];
    };
    const sets = [
      { label: 'plain', ws: plain },
      { label: 'streaming', ws: streaming },
      { label: 'idle', ws: idle },
    ];
    const rows: string[][] = [];
    for (const { label, ws } of sets) {
      const ms = ws.map((w) => Math.round(w.ms)).sort((x, y) => x - y);
      rows.push([`${label}: hit in every window (${ms[0]}-${ms[ms.length - 1]} ms)`, ...describe(every(ws))]);
      rows.push([`${label}: hit in any window`, ...describe(any(ws))]);
    }
    // The agent reports its load when a request starts (at most every 250 ms): when that report lands in every
    // window of one kind, its handler's files look like the request's; across both kinds that is less likely.
    const path = every([...plain, ...streaming]);
    rows.push(['plain and streaming: hit in every window of both', ...describe(path)]);
    rows.push([`background: hit in ${BACKGROUND_MS / 1000} s without requests, or any idle window`, ...describe([...background])]);
    rows.push(['plain and streaming, every window, never in the background', ...describe(path.filter((f) => !background.has(f)))]);
    console.log(`request path through the control plane at ${root}`);
    console.log(`(V8 precise coverage, function call counts; ${WINDOWS} windows of each kind, one request in each; files of functions/ and shared/ only)`);
    console.log(
      table(
        [
          'window',
          'functions/ files',
          'shared/ files',
          'functions/ folders, first level (+ files at its root)',
          'functions/ folders, every depth (+ files at its root)',
        ],
        rows,
      ),
    );
    console.log(`\nfiles hit in every window of a kind (P: plain, S: streaming; b: also hit in the background; the path is PS):`);
    for (const f of [...new Set([...every(plain), ...every(streaming)])].sort())
      console.log(`  ${every(plain).includes(f) ? 'P' : ' '}${every(streaming).includes(f) ? 'S' : ' '}${background.has(f) ? 'b' : ' '} ${f}`);
    const roots = path.filter((f) => f.split('/').length === 2 && f.startsWith('functions/'));
    console.log(
      `\nfirst-level folders on the path: ${[...folders(path, 'first')].map((d) => `${d.replace(/^functions\//, '')}/`).join(' ')}${roots.length ? `; files at the root: ${roots.map((f) => f.replace(/^functions\//, '')).join(' ')}` : ''}`,
    );
    console.log(`folders on the path, every depth: ${[...folders(path, 'all')].map((d) => `${d.replace(/^functions\//, '')}/`).join(' ')}`);
  } finally {
    if (node) await fleet.stopSimNodes([node]);
    await plane.stop();
    await session.post('Profiler.stopPreciseCoverage');
    session.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------------------

const args = process.argv.slice(2);
const roots: string[] = [];
let requestMode = false;
let checkMode = false;
for (let i = 0; i < args.length; i += 1) {
  const arg = args[i]!;
  if (arg === '--root' && args[i + 1]) roots.push(resolve(args[(i += 1)]!));
  else if (arg.startsWith('--root=')) roots.push(resolve(arg.slice('--root='.length)));
  else if (arg === '--request-path') requestMode = true;
  else if (arg === '--check') checkMode = true;
  else {
    console.error('usage: node --import tsx scripts/architecture-metrics.ts [--root DIR]... | --request-path [--root DIR] | --check');
    process.exit(2);
  }
}
if (roots.length === 0) roots.push(fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, ''));

if (requestMode) {
  if (roots.length !== 1) {
    console.error('--request-path measures one checkout at a time');
    process.exit(2);
  }
  await requestPath(roots[0]!);
  // Pools and sockets the plane leaves behind must not keep the measurement alive.
  process.exit(0);
} else if (checkMode) {
  // dependency-cruiser's folder rule does not see a cycle between a folder and one inside it (services/ and
  // services/registry/ once): this graph has every folder at every depth as a node of its own.
  const cycles = roots.flatMap((root) => {
    const { graphs } = staticMetrics(root);
    return Object.entries(graphs).flatMap(([key, g]) => g.cyclic.map((c) => `${key}: ${c.join(' ')}`));
  });
  for (const cycle of cycles) console.error(`folder cycle in ${cycle}`);
  if (cycles.length > 0) process.exit(1);
  console.log('no folder cycle in functions/ or agent/, at any depth');
} else {
  printStatic(roots.map(staticMetrics));
}
