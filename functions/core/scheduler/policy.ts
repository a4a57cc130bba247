import type { WorkspacePolicy } from '../../../shared/contracts/placement.js';
import type { DeploymentRuntime } from '../../../shared/contracts/deployment.js';
import { missingLabel, type PlacementConstraint } from './place.js';

/** What a workspace's policy asks of a replica set's machines, or why none may take it. */
export interface PolicyRules {
  constraints: PlacementConstraint[];
  /** Why no machine may take it at all (a data class the policy does not list, a runtime the class forbids); null otherwise. */
  refusal: string | null;
}

/**
 * The placement rules of a workspace's policy for one replica set (docs/scheduler.md): its data class must be
 * listed, its runtime (a template's name, or `simulated`) allowed by the class, and its machines must carry the
 * class's labels; a version under a licence the policy has a rule for runs only on machines with that rule's
 * labels. Pure.
 */
export function policyRules(policy: WorkspacePolicy, set: { dataClass: string | null; runtime: string; licence: string | null }): PolicyRules {
  const constraints: PlacementConstraint[] = [];
  if (set.dataClass !== null) {
    const rule = Object.hasOwn(policy.dataClasses, set.dataClass) ? policy.dataClasses[set.dataClass] : undefined;
    if (!rule) return { constraints, refusal: `data class ${set.dataClass} is not in the workspace's policy` };
    if (rule.runtimes !== null && !rule.runtimes.includes(set.runtime))
      return { constraints, refusal: `data class ${set.dataClass} may not run on runtime ${set.runtime}` };
    if (Object.keys(rule.machineSelector).length > 0) constraints.push({ rule: `data class ${set.dataClass}`, labels: rule.machineSelector });
  }
  if (set.licence !== null && Object.hasOwn(policy.licences, set.licence)) {
    const rule = policy.licences[set.licence]!;
    if (Object.keys(rule.machineSelector).length > 0) constraints.push({ rule: `licence ${set.licence}`, labels: rule.machineSelector });
  }
  return { constraints, refusal: null };
}

/**
 * Whether a replica on a machine carrying `labels` may serve its set under the policy as it is now: routing asks
 * this of every replica, so that a policy tightened after placement (a data class moved to other machines, or
 * removed) stops traffic to the replicas it no longer allows at once, before the controller moves them. Pure.
 */
export function policyAllows(rules: PolicyRules, labels: Record<string, string>): boolean {
  return rules.refusal === null && rules.constraints.every((constraint) => missingLabel(labels, constraint.labels) === null);
}

/** What a runtime is called in a data class's `runtimes` list. */
export const runtimeName = (runtime: DeploymentRuntime) => (runtime.kind === 'template' ? runtime.template : 'simulated');
