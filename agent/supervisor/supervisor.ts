import type { Assignment } from '../../shared/contracts/desired.js';
import type { RuntimeReport, RuntimeState } from '../../shared/contracts/heartbeat.js';
import type { RuntimeAdapter, RuntimeHandle } from '../runtimes/adapter.js';
import { planSupervision, restartDelayMs, type ManagedView } from './plan.js';

interface Managed extends ManagedView {
  assignment: Assignment;
  handle: RuntimeHandle | null;
  message: string | null;
  healthFailures: number;
  /** The desired generation this runtime was last confirmed under. */
  gen: number;
}

export interface SupervisorOptions {
  adapters: Record<Assignment['runtime']['kind'], RuntimeAdapter>;
  /** Called on every state change so the agent can report at once. */
  onChange: () => void;
  log: (event: string, fields: Record<string, unknown>) => void;
  checkIntervalMs?: number;
  startTimeoutMs?: number;
  /** Consecutive failed readiness probes before a ready runtime counts as failed. */
  maxHealthFailures?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Makes local runtimes match the verified desired state through the runtime adapters: launches (adopting a
 * runtime that survived an agent restart), watches liveness and readiness, restarts by policy, and retires
 * runtimes that left the desired state.
 */
export class Supervisor {
  private desired: Assignment[] = [];
  private gen = 0;
  private readonly managed = new Map<string, Managed>();
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private stopped = false;

  constructor(private readonly opts: SupervisorOptions) {}

  start(): void {
    this.timer = setInterval(() => void this.tick(), this.opts.checkIntervalMs ?? 500);
  }

  /** Adopts a new verified desired state. */
  apply(gen: number, assignments: Assignment[]): void {
    this.gen = gen;
    this.desired = assignments;
    for (const m of this.managed.values()) if (assignments.some((a) => a.assignmentId === m.assignmentId)) m.gen = gen;
    this.opts.onChange();
    void this.tick();
  }

  reports(): RuntimeReport[] {
    return [...this.managed.values()].map((m) => ({
      assignmentId: m.assignmentId,
      deploymentId: m.assignment.deploymentId,
      state: m.state,
      gen: m.gen,
      activeInvocations: 0,
      queueDepth: 0,
      restarts: m.restarts,
      message: m.message,
    }));
  }

  /** The handle of a ready runtime, for invocations. */
  readyHandle(assignmentId: string): { handle: RuntimeHandle; adapter: RuntimeAdapter } | null {
    const m = this.managed.get(assignmentId);
    if (!m || m.state !== 'ready' || !m.handle) return null;
    return { handle: m.handle, adapter: this.adapter(m.assignment) };
  }

  handles(): Array<{ assignment: Assignment; handle: RuntimeHandle | null; state: RuntimeState }> {
    return [...this.managed.values()].map((m) => ({ assignment: m.assignment, handle: m.handle, state: m.state }));
  }

  /** Stops supervising; with `stopRuntimes` the runtimes are stopped too, else they keep running for re-adoption. */
  async shutdown(opts: { stopRuntimes: boolean }): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    while (this.ticking) await sleep(20);
    if (!opts.stopRuntimes) return;
    await Promise.all(
      [...this.managed.values()].map(async (m) => {
        if (m.handle) await this.adapter(m.assignment).stop(m.handle).catch(() => {});
      }),
    );
  }

  private adapter(assignment: Assignment): RuntimeAdapter {
    return this.opts.adapters[assignment.runtime.kind];
  }

  private set(m: Managed, state: RuntimeState, message: string | null = null) {
    if (m.state === state && m.message === message) return;
    m.state = state;
    m.message = message;
    this.opts.log('runtime state', { assignmentId: m.assignmentId, state, message });
    this.opts.onChange();
  }

  private fail(m: Managed, message: string) {
    m.handle = null;
    m.restartAfter = Date.now() + restartDelayMs(m.restartPolicy, m.restarts);
    this.set(m, 'failed', message);
  }

  private async tick(): Promise<void> {
    if (this.ticking || this.stopped) return;
    this.ticking = true;
    try {
      await this.watch();
      const actions = planSupervision({ desired: this.desired, managed: [...this.managed.values()], now: Date.now() });
      for (const action of actions) {
        if (action.type === 'launch') {
          const m: Managed = {
            assignment: action.assignment,
            assignmentId: action.assignment.assignmentId,
            deploymentGeneration: action.assignment.deploymentGeneration,
            restartPolicy: action.assignment.restartPolicy,
            state: 'preparing',
            busy: false,
            restarts: 0,
            restartAfter: null,
            handle: null,
            message: null,
            healthFailures: 0,
            gen: this.gen,
          };
          this.managed.set(m.assignmentId, m);
          this.opts.onChange();
          this.run(m, () => this.launch(m, true));
        } else if (action.type === 'restart') {
          const m = this.managed.get(action.assignmentId)!;
          m.restarts += 1;
          this.run(m, () => this.launch(m, false));
        } else if (action.type === 'replace') {
          const m = this.managed.get(action.assignment.assignmentId)!;
          this.run(m, async () => {
            await this.retire(m, false);
            Object.assign(m, { assignment: action.assignment, deploymentGeneration: action.assignment.deploymentGeneration, restartPolicy: action.assignment.restartPolicy, restarts: 0 });
            await this.launch(m, false);
          });
        } else {
          const m = this.managed.get(action.assignmentId)!;
          this.run(m, () => this.retire(m, true));
        }
      }
    } finally {
      this.ticking = false;
    }
  }

  private run(m: Managed, work: () => Promise<void>) {
    m.busy = true;
    work()
      .catch((error: unknown) => this.fail(m, error instanceof Error ? error.message : String(error)))
      .finally(() => {
        m.busy = false;
      });
  }

  /** Liveness and readiness of every runtime that should be serving. */
  private async watch(): Promise<void> {
    for (const m of this.managed.values()) {
      if (m.busy || m.state !== 'ready' || !m.handle) continue;
      const adapter = this.adapter(m.assignment);
      if (!adapter.alive(m.handle)) {
        this.fail(m, 'runtime process exited');
        continue;
      }
      if (await adapter.ready(m.handle)) m.healthFailures = 0;
      else if (++m.healthFailures >= (this.opts.maxHealthFailures ?? 3)) {
        await adapter.stop(m.handle).catch(() => {});
        this.fail(m, 'readiness probe failed');
      }
    }
  }

  private async launch(m: Managed, mayAdopt: boolean): Promise<void> {
    const adapter = this.adapter(m.assignment);
    if (mayAdopt) {
      const adopted = await adapter.inspect(m.assignment);
      if (adopted) {
        m.handle = adopted;
        m.healthFailures = 0;
        this.opts.log('runtime adopted', { assignmentId: m.assignmentId, pid: adopted.pid });
        this.set(m, 'ready');
        return;
      }
    }
    this.set(m, 'preparing');
    await adapter.prepare(m.assignment);
    this.set(m, 'starting');
    const handle = await adapter.start(m.assignment);
    m.handle = handle;
    const deadline = Date.now() + (this.opts.startTimeoutMs ?? 120_000);
    while (!(await adapter.ready(handle))) {
      if (this.stopped) return;
      if (!adapter.alive(handle)) throw new Error('runtime process exited before it was ready');
      if (Date.now() > deadline) {
        await adapter.stop(handle).catch(() => {});
        throw new Error('runtime did not become ready in time');
      }
      await sleep(100);
    }
    m.healthFailures = 0;
    this.set(m, 'ready');
  }

  private async retire(m: Managed, forget: boolean): Promise<void> {
    this.set(m, 'draining');
    if (m.handle) {
      const adapter = this.adapter(m.assignment);
      await adapter.drain(m.handle);
      await adapter.stop(m.handle);
      m.handle = null;
    }
    this.set(m, 'stopped');
    if (forget) {
      this.managed.delete(m.assignmentId);
      this.opts.onChange();
    }
  }
}
