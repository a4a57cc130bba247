import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { SimNode } from '../../functions/hosts/dev/fleet.js';

/** What a simulated node's agent records of each runtime it runs (`<state>/runtimes/<assignment>.json`). */
export interface RuntimeRecord {
  pid: number;
  baseUrl: string;
  assignmentId: string;
  /** The token the runtime answers only to. */
  token: string;
}

export async function runtimeRecords(node: SimNode): Promise<RuntimeRecord[]> {
  const dir = join(node.stateDir, 'runtimes');
  const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'));
  return await Promise.all(files.map(async (f) => JSON.parse(await readFile(join(dir, f), 'utf8')) as RuntimeRecord));
}

/**
 * Stops the runtimes a node's agent left running: an agent killed without warning leaves them for the next agent
 * to adopt, and no next agent comes in a test.
 */
export async function stopLeftRuntimes(node: SimNode): Promise<void> {
  for (const record of await runtimeRecords(node)) {
    try {
      process.kill(record.pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}
