import { AGENT_PLACEHOLDERS } from '../../shared/contracts/runtime-template.js';
import type { RuntimeIds } from '../runtime-user.js';
import { LaunchRefused } from './adapter.js';

/** What a runtime is launched from, whatever its kind. */
export interface LaunchSpec {
  /** Absolute path; executed directly, never through a shell. */
  executable: string;
  /** argv after the executable, one element each; the agent's placeholders (`{port}`...) are filled at launch. */
  args: string[];
  /** The assignment's own variables (the local policy allowed each name). */
  env: Record<string, string>;
  healthPath: string;
  /** Where its engine's metrics are read; null: it serves none. */
  metricsPath: string | null;
  /** The digest the executable must have on disk; null for the agent's own binary (the simulator). */
  executableSha256: string | null;
  cwd: string;
  /** The ids the process is started with; null: as the agent (a program that switches to the runtime's ids itself). */
  spawnAs: RuntimeIds | null;
}

/** The PATH every runtime gets: never the agent's own, which an administrator's shell may have extended. */
export const SAFE_PATH = '/usr/local/bin:/usr/bin:/bin';

export type PlaceholderValues = Record<(typeof AGENT_PLACEHOLDERS)[number], string | null>;

const PLACEHOLDER = new RegExp(`\\{(${AGENT_PLACEHOLDERS.join('|')})\\}`, 'g');

/**
 * The argv with the agent's placeholders filled, in one pass (a value that contains a placeholder is never filled
 * again). Other braces are left as they are: the control plane filled the operator's parameters. A placeholder
 * with no value (`{model_path}` of an assignment without an artifact) refuses the launch. Pure.
 */
export function fillPlaceholders(args: readonly string[], values: PlaceholderValues): string[] {
  return args.map((arg) =>
    arg.replace(PLACEHOLDER, (_match, name: keyof PlaceholderValues) => {
      const value = values[name];
      if (value === null) throw new LaunchRefused(`the runtime's arguments need {${name}}, which this assignment does not give (no artifact)`);
      return value;
    }),
  );
}

/**
 * A runtime's whole environment: its assignment's variables and what the agent sets, nothing of the agent's own
 * (its proxy settings, DATABASE_URL under `npm start`...). The agent's values come last, so none is overridden. Pure.
 */
export function runtimeEnv(
  assigned: Record<string, string>,
  facts: { home: string; port: number; instanceId: string; gpuIndices: readonly number[]; token?: string },
): Record<string, string> {
  return {
    ...assigned,
    PATH: SAFE_PATH,
    HOME: facts.home,
    PORT: String(facts.port),
    LUNANEXA_RUNTIME_INSTANCE: facts.instanceId,
    ...(facts.token === undefined ? {} : { LUNANEXA_RUNTIME_TOKEN: facts.token }),
    ...(facts.gpuIndices.length > 0 ? { CUDA_VISIBLE_DEVICES: facts.gpuIndices.join(',') } : {}),
  };
}

/** The lowest `count` GPU indices of `available` that no other runtime holds, or null when too few are free. Pure. */
export function allocateGpus(available: readonly number[], held: ReadonlySet<number>, count: number): number[] | null {
  const free = [...available].sort((a, b) => a - b).filter((index) => !held.has(index));
  return free.length >= count ? free.slice(0, count) : null;
}

/**
 * A run worker's whole environment: its command's variables (its rank and rendezvous among them) and what the agent
 * sets, nothing of the agent's own. CUDA_VISIBLE_DEVICES is always the agent's: a worker that asked for no GPU sees
 * none, rather than every GPU of the machine. Pure.
 */
export function workerEnv(assigned: Record<string, string>, facts: { home: string; gpuIndices: readonly number[] }): Record<string, string> {
  return { ...assigned, PATH: SAFE_PATH, HOME: facts.home, CUDA_VISIBLE_DEVICES: facts.gpuIndices.join(',') };
}
