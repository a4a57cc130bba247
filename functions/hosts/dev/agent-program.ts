import { fileURLToPath } from 'node:url';

/** The agent's entry in the source tree, run under tsx's loader. */
const AGENT_ENTRY = fileURLToPath(new URL('../../../agent/main.ts', import.meta.url));
const BUILD_SCRIPT = new URL('../../../scripts/build.mjs', import.meta.url).href;

/**
 * Names the single-file agent that dev fleets run (`npm start`, the test suite's globalSetup): set by whoever built it
 * from this source tree with `buildAgentBundle`, never a dist/ file left from an older build.
 */
const BUNDLE_VARIABLE = 'LUNANEXA_DEV_AGENT_BUNDLE';

/**
 * Node's arguments that run the agent: its bundle when one was built for this process tree, the source under tsx
 * otherwise. A simulated runtime is the agent re-run (agent/runtimes/simulated.ts), so it runs the same way.
 */
export function agentProgram(): string[] {
  const bundle = process.env[BUNDLE_VARIABLE];
  return bundle ? [bundle] : ['--import', 'tsx', AGENT_ENTRY];
}

/**
 * Bundles the agent's source into `outDir` (as `npm run build` does into dist/) and names it for every agent this
 * process and its children start. Under tsx each agent process and each simulated runtime loaded the agent's
 * modules through the loader: about 1 s of CPU apiece against 0.3 s from the bundle, and `npm start`'s four nodes
 * start twelve of them on a machine of two cores. The build takes about a second.
 */
export async function buildAgentBundle(outDir: string): Promise<string> {
  const { build } = (await import(BUILD_SCRIPT)) as {
    build(opts: { outDir: string; only: Array<'agent'> }): Promise<{ agent: { path: string } }>;
  };
  const { agent } = await build({ outDir, only: ['agent'] });
  process.env[BUNDLE_VARIABLE] = agent.path;
  return agent.path;
}
