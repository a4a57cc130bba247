import { describe, expect, it } from 'vitest';
import { runtimeEvents } from '../../functions/services/heartbeats.js';
import type { RuntimeReport } from '../../shared/contracts/heartbeat.js';
import { runtimeReport } from '../helpers/machine.js';

const machine = { machineId: 'mch_1', workspaceId: 'ws_1', credentialId: 'crd_1', credentialExpiresAt: new Date(Date.now() + 3_600_000) };
const report = (assignmentId: string, state: RuntimeReport['state'], message: string | null = null) => runtimeReport(assignmentId, 'dep_a', { state, message });
const before = (assignmentId: string, state: string) => ({ assignmentId, deploymentId: 'dep_a', state });

describe('deployment events of a heartbeat', () => {
  it('records entering starting, ready and failed once each, with the failure reason', () => {
    const events = runtimeEvents({
      machine,
      before: [before('a1', 'preparing'), before('a2', 'starting'), before('a3', 'ready')],
      runtimes: [report('a1', 'starting'), report('a2', 'ready'), report('a3', 'failed', 'runtime process exited')],
      retired: new Set(),
    });
    expect(events.map((e) => [e.type, e.assignmentId, e.message])).toEqual([
      ['started', 'a1', null],
      ['ready', 'a2', null],
      ['failed', 'a3', 'runtime process exited'],
    ]);
    expect(events.every((e) => e.machineId === 'mch_1' && e.workspaceId === 'ws_1' && e.deploymentId === 'dep_a')).toBe(true);
  });

  it('records nothing for a state that did not change, nor for preparing and draining', () => {
    expect(
      runtimeEvents({ machine, before: [before('a1', 'ready')], runtimes: [report('a1', 'ready'), report('a2', 'preparing')], retired: new Set() }),
    ).toEqual([]);
    expect(runtimeEvents({ machine, before: [before('a1', 'ready')], runtimes: [report('a1', 'draining')], retired: new Set() })).toEqual([]);
  });

  it('a runtime gone from the report is drained when it was retired or draining, and not when the agent merely restarted', () => {
    const gone = (state: string, retired: string[]) =>
      runtimeEvents({ machine, before: [before('a1', state)], runtimes: [], retired: new Set(retired) }).map((e) => e.type);
    expect(gone('ready', ['a1'])).toEqual(['drained']);
    expect(gone('draining', [])).toEqual(['drained']);
    expect(gone('ready', [])).toEqual([]);
  });
});
