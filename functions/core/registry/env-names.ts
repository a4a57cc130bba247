import { AGENT_ENV } from '../../../shared/contracts/runtime-template.js';
import { codeLoadingEnvReason } from '../../../shared/env-deny.js';

/** Why a template cannot allow `name` (nor a deployment set it), or null when it can. Pure. */
export function forbiddenEnvName(name: string): string | null {
  if ((AGENT_ENV as readonly string[]).includes(name) || name.startsWith('LUNANEXA_')) return 'the agent sets it for every runtime itself';
  return codeLoadingEnvReason(name);
}
