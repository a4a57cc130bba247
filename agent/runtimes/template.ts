import type { TemplateRuntime } from '../../shared/contracts/desired.js';
import type { RuntimeIds } from '../runtime-user.js';
import type { LaunchSpec } from './launch.js';

/**
 * The launch of a runtime the control plane resolved from a registered template (vLLM, llama.cpp...): its pinned
 * executable with its argv, started as the runtime's user, run from `/` (a directory every runtime user can enter,
 * and no one's files).
 */
export function templateLaunch(spec: TemplateRuntime, ids: RuntimeIds | null): LaunchSpec {
  return {
    executable: spec.executable,
    args: spec.args,
    env: spec.env,
    healthPath: spec.healthPath,
    metricsPath: spec.metricsPath ?? null,
    executableSha256: spec.executableSha256,
    cwd: '/',
    spawnAs: ids,
  };
}
