import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAgentBundle } from '../functions/hosts/dev/agent-program.js';

/**
 * Once per test run, before the workers start (they inherit its environment): the agent that the suites' simulated
 * nodes run, bundled from this tree, as `npm start` does. Under tsx every agent and simulated runtime process of
 * the suite spent about a second of CPU loading the source.
 */
export default async function setup(): Promise<() => Promise<void>> {
  const dir = await mkdtemp(join(tmpdir(), 'lnx-test-agent-'));
  await buildAgentBundle(dir);
  return async () => await rm(dir, { recursive: true, force: true });
}
