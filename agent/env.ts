import { z } from 'zod';

/**
 * The agent's environment, parsed once at start (main.ts): the rest of the agent receives values, never reads
 * process.env. The proxy variables (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) are not here: undici's EnvHttpProxyAgent
 * reads them, in either case, for every outbound request (proxy.ts).
 */
export const AgentEnv = z.object({
  /** The enrollment token `enroll --token -` takes before standard input: kept off argv, which every local user can read. */
  LUNANEXA_ENROLLMENT_TOKEN: z.string().optional(),
  /** Where the machine key, identity and runtime records are kept: the default of `--state-dir`. */
  LUNANEXA_AGENT_STATE_DIR: z.string().default('/var/lib/lunanexa-agent'),
  /** The local policy file, when `run --policy` names none: a file named here must exist (the default one may not). */
  LUNANEXA_AGENT_POLICY: z.string().optional(),
  /** The default of `run --uplink`: `auto` (one long-lived uplink) or `off` (one upload per invocation). */
  LUNANEXA_AGENT_UPLINK: z.enum(['auto', 'off']).default('auto'),
  /**
   * The address the machine's heartbeats give (a run's rank 0 is reached at it: MASTER_ADDR), when the first
   * non-internal IPv4 is not the one other machines of its site reach it at (several interfaces, NAT).
   */
  LUNANEXA_AGENT_ADDRESS: z.string().min(1).max(255).optional(),
  /**
   * The nvidia-smi the agent lists GPUs with, at enrollment (the inventory) and when it reserves them: its path when
   * it is not on the search path, or the simulator's stand-in (`sim/nvidia-smi.mjs`, one GB10) on simulated nodes.
   */
  LUNANEXA_AGENT_NVIDIA_SMI: z.string().min(1).default('nvidia-smi'),
  /**
   * How many finished run workers' logs the agent keeps after their release (`runs logs` reads them once a run has
   * ended): the most recent ones, older ones deleted. Each is bounded like a running worker's (two segments of 2 MiB).
   */
  LUNANEXA_AGENT_KEPT_WORKER_LOGS: z.coerce.number().int().min(0).max(10_000).default(64),
  /**
   * How often the agent samples its GPUs (nvidia-smi) and its runtimes' engine metrics for its heartbeats
   * (docs/telemetry.md), in ms; 0 sends none.
   */
  LUNANEXA_AGENT_TELEMETRY_MS: z.coerce.number().int().min(0).max(3_600_000).default(5_000),
});
export type AgentEnv = z.output<typeof AgentEnv>;

/** The environment, or an error naming each variable that is wrong. */
export function parseAgentEnv(env: NodeJS.ProcessEnv): AgentEnv {
  const parsed = AgentEnv.safeParse(env);
  if (parsed.success) return parsed.data;
  throw new Error(`invalid environment: ${parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ')}`);
}
