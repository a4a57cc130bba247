import { describe, expect, it } from 'vitest';
import { IDLE, type RuntimeLoad } from '../../agent/supervisor/plan.js';
import { machineStatus, runtimeReport, WARM_WINDOW_MS, warmModels, type RuntimeFacts } from '../../agent/supervisor/report.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { RuntimeReport, type RuntimeState } from '../../shared/contracts/heartbeat.js';

const assignment = (id: string, model = 'sim-chat'): Assignment => ({
  assignmentId: id,
  deploymentId: `dep-${model}`,
  deploymentName: model,
  model,
  deploymentGeneration: 3,
  runtime: { kind: 'simulated', model, ttftMs: 1, tokensPerSecond: 10, loadMs: 0, memoryMiB: 1, failureRate: 0 },
  artifact: null,
  restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 100 },
  resources: { gpus: 0, memoryMiB: 1 },
  startup: { timeoutMs: 600_000, probeIntervalMs: 1_000, failureThreshold: 3 },
  templateHash: 'template',
});

const NOW = 10_000_000;
const facts = (extra: Partial<RuntimeFacts> = {}): RuntimeFacts => ({
  assignment: assignment('a'),
  state: 'ready',
  gen: 7,
  restarts: 1,
  message: null,
  launchStartedAt: null,
  load: IDLE,
  ...extra,
});
const load = (extra: Partial<RuntimeLoad>): RuntimeLoad => ({ ...IDLE, ...extra });
const STATES: RuntimeState[] = ['preparing', 'pulling', 'starting', 'ready', 'draining', 'failed', 'stopped'];

describe('runtimeReport', () => {
  it('reports what was measured, in the contract', () => {
    const report = runtimeReport(facts({ load: load({ queued: 2, active: 5, lastServedAt: NOW - 1_000, latestDeadline: NOW + 5_000 }) }), NOW);
    expect(report).toEqual({
      assignmentId: 'a',
      deploymentId: 'dep-sim-chat',
      state: 'ready',
      gen: 7,
      activeInvocations: 5,
      queueDepth: 2,
      warm: true,
      progress: null,
      restarts: 1,
      message: null,
      engine: null,
    });
    expect(RuntimeReport.parse(report)).toEqual(report);
  });

  it('is warm only while ready and serving, or served within the last five minutes', () => {
    const warm = (state: RuntimeState, l: Partial<RuntimeLoad>) => runtimeReport(facts({ state, load: load(l) }), NOW).warm;
    expect(warm('ready', {})).toBe(false);
    expect(warm('ready', { active: 1 })).toBe(true);
    // Queued only: the runtime has not answered anything yet.
    expect(warm('ready', { queued: 3 })).toBe(false);
    expect(warm('ready', { lastServedAt: NOW })).toBe(true);
    expect(warm('ready', { lastServedAt: NOW - WARM_WINDOW_MS + 1 })).toBe(true);
    expect(warm('ready', { lastServedAt: NOW - WARM_WINDOW_MS })).toBe(false);
    for (const state of STATES.filter((s) => s !== 'ready')) expect(warm(state, { active: 2, lastServedAt: NOW })).toBe(false);
  });

  it('reports start-up progress against the start timeout while preparing, pulling or starting, else none', () => {
    for (const state of ['preparing', 'pulling', 'starting'] as const) {
      expect(runtimeReport(facts({ state, launchStartedAt: NOW - 42_000 }), NOW).progress).toEqual({ elapsedMs: 42_000, timeoutMs: 600_000 });
    }
    for (const state of ['ready', 'draining', 'failed', 'stopped'] as const) {
      expect(runtimeReport(facts({ state, launchStartedAt: NOW - 42_000 }), NOW).progress).toBeNull();
    }
    // Before its launch began (a restart waiting for its backoff), and never negative.
    expect(runtimeReport(facts({ state: 'preparing', launchStartedAt: null }), NOW).progress).toBeNull();
    expect(runtimeReport(facts({ state: 'starting', launchStartedAt: NOW + 5 }), NOW).progress).toEqual({ elapsedMs: 0, timeoutMs: 600_000 });
  });

  it('carries the failure message', () => {
    expect(runtimeReport(facts({ state: 'failed', message: 'runtime process exited' }), NOW)).toMatchObject({
      state: 'failed',
      message: 'runtime process exited',
      warm: false,
    });
  });
});

describe('machineStatus', () => {
  it('is draining while the agent shuts down, degraded while a runtime is failed, else ready', () => {
    expect(machineStatus(false, [])).toBe('ready');
    for (const state of STATES.filter((s) => s !== 'failed')) expect(machineStatus(false, [state, 'ready'])).toBe('ready');
    expect(machineStatus(false, ['ready', 'failed'])).toBe('degraded');
    expect(machineStatus(true, ['ready', 'failed'])).toBe('draining');
    expect(machineStatus(true, [])).toBe('draining');
  });
});

describe('warmModels', () => {
  it('lists the models of ready runtimes, each once', () => {
    const runtimes = [
      { assignment: assignment('a', 'llama'), state: 'ready' as const },
      { assignment: assignment('b', 'llama'), state: 'ready' as const },
      { assignment: assignment('c', 'mistral'), state: 'starting' as const },
      { assignment: assignment('d', 'gemma'), state: 'ready' as const },
      { assignment: assignment('e', 'qwen'), state: 'draining' as const },
    ];
    expect(warmModels(runtimes)).toEqual(['gemma', 'llama']);
    expect(warmModels([])).toEqual([]);
  });
});
