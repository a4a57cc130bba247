import { describe, expect, it } from 'vitest';
import { policyAllows, policyRules } from '../../functions/core/scheduler/policy.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';

const policy = WorkspacePolicy.parse({
  dataClasses: {
    public: {},
    pii: { machineSelector: { secure: 'yes' }, runtimes: ['vllm', 'simulated'] },
    secret: { machineSelector: { vault: 'yes' }, runtimes: [] },
  },
  licences: { 'LicenseRef-llama3': { machineSelector: { research: 'yes' } }, 'apache-2.0': { machineSelector: {} } },
});
const rules = (set: Partial<Parameters<typeof policyRules>[1]>) => policyRules(policy, { dataClass: null, runtime: 'simulated', licence: null, ...set });

describe('placement rules of a workspace policy', () => {
  it('no data class and no licence rule: unconstrained', () => {
    expect(rules({})).toEqual({ constraints: [], refusal: null });
    expect(rules({ licence: 'MIT' })).toEqual({ constraints: [], refusal: null });
    expect(policyRules(WorkspacePolicy.parse({}), { dataClass: null, runtime: 'vllm', licence: 'LicenseRef-llama3' })).toEqual({
      constraints: [],
      refusal: null,
    });
  });

  it('a data class the policy does not list refuses every machine', () => {
    expect(rules({ dataClass: 'medical' })).toEqual({ constraints: [], refusal: "data class medical is not in the workspace's policy" });
    // Inherited names of a plain object are not classes.
    expect(rules({ dataClass: 'constructor' }).refusal).toBe("data class constructor is not in the workspace's policy");
  });

  it('a runtime the class does not allow refuses every machine; runtimes null allows any', () => {
    expect(rules({ dataClass: 'pii', runtime: 'llama-cpp' })).toEqual({ constraints: [], refusal: 'data class pii may not run on runtime llama-cpp' });
    expect(rules({ dataClass: 'secret', runtime: 'simulated' }).refusal).toBe('data class secret may not run on runtime simulated');
    expect(rules({ dataClass: 'public', runtime: 'anything' })).toEqual({ constraints: [], refusal: null });
  });

  it('an allowed class adds its machine selector; a licence rule adds its own', () => {
    expect(rules({ dataClass: 'pii', runtime: 'vllm' })).toEqual({ constraints: [{ rule: 'data class pii', labels: { secure: 'yes' } }], refusal: null });
    expect(rules({ licence: 'LicenseRef-llama3' })).toEqual({
      constraints: [{ rule: 'licence LicenseRef-llama3', labels: { research: 'yes' } }],
      refusal: null,
    });
    expect(rules({ licence: 'apache-2.0' })).toEqual({ constraints: [], refusal: null });
    expect(rules({ dataClass: 'pii', licence: 'LicenseRef-llama3' }).constraints.map((c) => c.rule)).toEqual(['data class pii', 'licence LicenseRef-llama3']);
  });
});

describe('policyAllows (routing)', () => {
  const policy = WorkspacePolicy.parse({ dataClasses: { pii: { machineSelector: { zone: 'secure' }, runtimes: ['simulated'] } } });
  it('lets a replica serve only on a machine the class allows now', () => {
    const rules = policyRules(policy, { dataClass: 'pii', runtime: 'simulated', licence: null });
    expect(policyAllows(rules, { zone: 'secure', rack: '1' })).toBe(true);
    expect(policyAllows(rules, { zone: 'open' })).toBe(false);
    expect(policyAllows(rules, {})).toBe(false);
  });
  it('stops every replica of a class the policy no longer lists, or a runtime it no longer allows', () => {
    expect(policyAllows(policyRules(WorkspacePolicy.parse({}), { dataClass: 'pii', runtime: 'simulated', licence: null }), { zone: 'secure' })).toBe(false);
    expect(policyAllows(policyRules(policy, { dataClass: 'pii', runtime: 'vllm', licence: null }), { zone: 'secure' })).toBe(false);
  });
  it('leaves a deployment without a class alone', () => {
    expect(policyAllows(policyRules(policy, { dataClass: null, runtime: 'vllm', licence: null }), {})).toBe(true);
  });
});
