import { open } from 'node:fs/promises';
import { AgentPolicy, DENY_ALL } from './policy.js';

/** Where the policy is read from when neither `--policy` nor LUNANEXA_AGENT_POLICY names a file. */
export const DEFAULT_POLICY_PATH = '/etc/lunanexa/agent.json';

/** The policy file to read; a file named explicitly must exist, the default one may be missing. */
export interface PolicySource {
  path: string;
  required: boolean;
}

export interface LoadedPolicy {
  /** False when the default file is missing: the policy is then DENY_ALL. */
  found: boolean;
  path: string;
  policy: AgentPolicy;
}

/**
 * Reads and validates the local policy. Without a file at the default path the node runs nothing (DENY_ALL).
 * A file that others than its owner may write, or whose owner is neither root nor this agent's user, is refused:
 * whoever can write it decides what runs here.
 */
export async function loadPolicy(source: PolicySource): Promise<LoadedPolicy> {
  let file;
  try {
    file = await open(source.path, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT' && !source.required) return { found: false, path: source.path, policy: DENY_ALL };
    throw new Error(`cannot read the local policy ${source.path}: ${(error as Error).message}`, { cause: error });
  }
  let text: string;
  try {
    const info = await file.stat();
    if (!info.isFile()) throw new Error(`the local policy ${source.path} is not a regular file`);
    if ((info.mode & 0o022) !== 0)
      throw new Error(`the local policy ${source.path} is writable by its group or others (mode ${(info.mode & 0o777).toString(8)}): refused`);
    const self = process.getuid?.();
    if (self !== undefined && info.uid !== 0 && info.uid !== self)
      throw new Error(`the local policy ${source.path} belongs to uid ${info.uid}, neither root nor this agent: refused`);
    text = await file.readFile('utf8');
  } finally {
    await file.close();
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`the local policy ${source.path} is not JSON: ${(error as Error).message}`, { cause: error });
  }
  const parsed = AgentPolicy.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => `${issue.path.join('.') || '(top level)'}: ${issue.message}`).join('; ');
    throw new Error(`the local policy ${source.path} is invalid: ${issues}`);
  }
  return { found: true, path: source.path, policy: parsed.data };
}
