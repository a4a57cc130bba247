// The dependency rules of docs/architecture.md, checked in CI (`npm run deps:check`). Imports point one way:
// hosts -> api -> dataplane | controller -> link -> services -> core -> store -> kernel, and everything may use
// shared/. A layer lists what it may import; anything else under functions/ is forbidden.
const F = '^functions/';
const layers = {
  hosts: null, // entries compose everything
  api: ['api', 'dataplane', 'link', 'services', 'core', 'store', 'kernel'],
  dataplane: ['dataplane', 'link', 'services', 'core', 'store', 'kernel'],
  controller: ['controller', 'services', 'core', 'store', 'kernel'],
  link: ['link', 'services', 'core', 'store', 'kernel'],
  services: ['services', 'core', 'store', 'kernel'],
  core: ['core', 'store', 'kernel'],
  store: ['store', 'kernel'],
  kernel: ['kernel'],
};

const layerRules = Object.entries(layers)
  .filter(([, allowed]) => allowed)
  .map(([layer, allowed]) => ({
    name: `${layer}-imports-only-below`,
    comment: `functions/${layer}/ may import only ${allowed.map((a) => `${a}/`).join(', ')} (docs/architecture.md)`,
    severity: 'error',
    from: { path: `${F}${layer}/` },
    to: { path: F, pathNot: `${F}(${allowed.join('|')})/` },
  }));

module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: 'surfaces-read-the-store-through-services',
      comment: 'a surface reads and writes tables through service verbs; it may name the store only in types',
      severity: 'error',
      from: { path: `${F}api/` },
      to: { path: `${F}store/`, dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'core-is-pure',
      comment: 'core/ holds pure rules: it may name store rows in types, never query them',
      severity: 'error',
      from: { path: `${F}core/` },
      to: { path: `${F}store/`, dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'ports-import-no-adapter',
      comment: 'a port is an interface: kernel/ports/ imports no concrete module',
      severity: 'error',
      from: { path: `${F}kernel/ports/` },
      to: { path: `${F}`, pathNot: `${F}kernel/ports/` },
    },
    {
      name: 'shared-stands-alone',
      comment: 'shared/ is what control plane, agent and CLI share: it imports none of them',
      severity: 'error',
      from: { path: '^shared/' },
      to: { path: '^(functions|agent|cli|sim|runner|sdk)/' },
    },
    {
      name: 'agent-is-its-own-program',
      comment: 'the node agent runs on GPU machines: it shares contracts, never control-plane or CLI code',
      severity: 'error',
      from: { path: '^(agent|sim)/' },
      to: { path: '^(functions|cli|sdk)/' },
    },
    {
      name: 'runner-is-its-own-program',
      comment: "a job's runner runs wherever a backend starts it and talks HTTP to the control plane: it shares contracts only",
      severity: 'error',
      from: { path: '^runner/' },
      to: { path: '^(functions|agent|cli|sim)/' },
    },
    {
      name: 'cli-is-a-client',
      comment: 'the CLI talks HTTP to the management API: it shares contracts, never server or agent code',
      severity: 'error',
      from: { path: '^cli/' },
      to: { path: '^(functions|agent|sim)/' },
    },
    {
      name: 'sdk-is-a-client',
      comment: 'the SDK (@lunanexa/sdk) talks HTTP to the control plane: it shares contracts, never server, agent or CLI code',
      severity: 'error',
      from: { path: '^sdk/' },
      to: { path: '^(functions|agent|cli|sim|runner)/' },
    },
    {
      name: 'no-folder-cycle',
      comment: 'folders import one way: a folder-level cycle is forbidden',
      severity: 'error',
      scope: 'folder',
      from: { path: '^(functions|agent|sim|cli|shared|runner|sdk)/' },
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(node_modules|dist)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.mjs', '.js', '.json'] },
  },
};
