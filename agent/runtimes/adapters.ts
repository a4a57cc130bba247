import type { Assignment } from '../../shared/contracts/desired.js';
import type { AgentPolicy } from '../policy.js';
import type { RuntimeUsers } from '../runtime-user.js';
import type { RuntimeAdapter } from './adapter.js';
import type { MachineHolds } from './holds.js';
import { ProcessAdapter } from './process.js';
import { simulatedLaunch } from './simulated.js';
import { templateLaunch } from './template.js';

export interface AdaptersOptions {
  stateDir: string;
  policy: AgentPolicy;
  /** Whom runtimes run as; null when the agent runs as root and its policy names no one (nothing runs). */
  users: RuntimeUsers | null;
  /** The machine's GPU indices (from its inventory). */
  gpus?: () => Promise<number[]>;
  /** The GPUs and uids the machine's processes hold, shared with the run workers. */
  holds?: MachineHolds;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/**
 * The adapters of this agent, by runtime kind. Both kinds are processes: one adapter serves them, so a runtime
 * whose kind changes keeps one record and one log ring.
 */
export function createAdapters(opts: AdaptersOptions): Record<Assignment['runtime']['kind'], RuntimeAdapter> {
  const adapter = new ProcessAdapter({
    ...opts,
    launchSpec: (assignment, ids) =>
      assignment.runtime.kind === 'simulated' ? simulatedLaunch(assignment.runtime, ids) : templateLaunch(assignment.runtime, ids),
  });
  return { template: adapter, simulated: adapter };
}

/** The versions verified in the adapters' caches (both kinds share one adapter, hence one cache), each once. */
export function cachedVersions(adapters: Record<Assignment['runtime']['kind'], RuntimeAdapter>): string[] {
  return [...new Set(Object.values(adapters).flatMap((adapter) => adapter.cachedVersions?.() ?? []))].sort().slice(0, 256);
}
