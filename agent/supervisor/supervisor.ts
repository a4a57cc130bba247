import type { Assignment } from '../../shared/contracts/desired.js';
import type { RuntimeReport, RuntimeState } from '../../shared/contracts/heartbeat.js';
import type { RuntimeAdapter, RuntimeHandle } from '../runtimes/adapter.js';
import { planSupervision, restartDelayMs, type ManagedView } from './plan.js';

interface Managed extends Omit<ManagedView, 'assignmentId' | 'deploymentGeneration' | 'restartPolicy'> {
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
  /** The tick in progress: shutdown waits for it. */
  private ticking: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly opts: SupervisorOptions) {}

  start(): void {
    this.timer = setInterval(() => this.tick(), this.opts.checkIntervalMs ?? 500);
  }

  /** Adopts a new verified desired state. */
  apply(gen: number, assignments: Assignment[]): void {
    this.gen = gen;
    this.desired = assignments;
    for (const m of this.managed.values()) if (assignments.some((a) => a.assignmentId === m.assignment.assignmentId)) m.gen = gen;
    this.opts.onChange();
    this.tick();
  }

  reports(): RuntimeReport[] {
    return [...this.managed.values()].map((m) => ({
      assignmentId: m.assignment.assignmentId,
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

  /** The tail of a runtime's log, or nothing when it has no running process. */
  async logs(assignmentId: string, lines: number): Promise<string[]> {
    const m = this.managed.get(assignmentId);
    return m?.handle ? await this.adapter(m.assignment).logs(m.handle, lines) : [];
  }

  handles(): Array<{ assignment: Assignment; handle: RuntimeHandle | null; state: RuntimeState }> {
    return [...this.managed.values()].map((m) => ({ assignment: m.assignment, handle: m.handle, state: m.state }));
  }

  /** Stops supervising; with `stopRuntimes` the runtimes are stopped too, else they keep running for re-adoption. */
  async shutdown(opts: { stopRuntimes: boolean }): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.ticking;
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
    this.opts.log('runtime state', { assignmentId: m.assignment.assignmentId, state, message });
    this.opts.onChange();
  }

  private fail(m: Managed, message: string) {
    m.handle = null;
    m.restartAfter = Date.now() + restartDelayMs(m.assignment.restartPolicy, m.restarts);
    this.set(m, 'failed', message);
  }

  private tick(): void {
    if (this.ticking || this.stopped) return;
    this.ticking = this.reconcile().finally(() => {
      this.ticking = null;
    });
  }

  private async reconcile(): Promise<void> {
    await this.watch();
    const managed = [...this.managed.values()].map((m) => ({
      ...m,
      assignmentId: m.assignment.assignmentId,
      deploymentGeneration: m.assignment.deploymentGeneration,
      restartPolicy: m.assignment.restartPolicy,
    }));
    const actions = planSupervision({ desired: this.desired, managed, now: Date.now() });
    for (const action of actions) {
      if (action.type === 'launch') {
        const m: Managed = {
          assignment: action.assignment,
          state: 'preparing',
          busy: false,
          restarts: 0,
          restartAfter: null,
          handle: null,
          message: null,
          healthFailures: 0,
          gen: this.gen,
        };
        this.managed.set(action.assignment.assignmentId, m);
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
          m.assignment = action.assignment;
          m.restarts = 0;
          await this.launch(m, false);
        });
      } else {
        const m = this.managed.get(action.assignmentId)!;
        this.run(m, () => this.retire(m, true));
      }
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
        this.opts.log('runtime adopted', { assignmentId: m.assignment.assignmentId, pid: adopted.pid });
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
      this.managed.delete(m.assignment.assignmentId);
      this.opts.onChange();
    }
  }
}
