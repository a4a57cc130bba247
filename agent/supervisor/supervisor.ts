import { setTimeout as sleep } from 'node:timers/promises';
import type { Assignment } from '../../shared/contracts/desired.js';
import type { MachineStatus, RuntimeReport, RuntimeState } from '../../shared/contracts/heartbeat.js';
import type { PullProgress } from '../artifacts/cache.js';
import { LaunchRefused, localDetail, type RuntimeAdapter, type RuntimeHandle } from '../runtimes/adapter.js';
import { drainUntil, planSupervision, restartDelayMs, type ManagedView, type RuntimeLoad, type SupervisorAction } from './plan.js';
import { machineStatus, runtimeReport, warmModels, type Pull } from './report.js';

/** Why a launch was aborted: its runtime left the desired state (or its template changed), it ran out of time, or the agent stops. */
type AbortReason = 'retired' | 'timeout' | 'shutdown';

interface Launch {
  controller: AbortController;
  /** Epoch ms; the start timeout and the reported progress count from here. */
  startedAt: number;
  /** Epoch ms before which the start timeout does not fire, whatever `startedAt`. */
  graceUntil: number;
  timer: NodeJS.Timeout | undefined;
  /** Set while prepare downloads files: the start timeout is held meanwhile (a stalled download fails by itself). */
  pull: Pull | null;
}

interface Managed {
  /** The assignment the runtime runs under (a new template only takes effect through a replacement). */
  assignment: Assignment;
  state: RuntimeState;
  handle: RuntimeHandle | null;
  restarts: number;
  restartAfter: number | null;
  message: string | null;
  healthFailures: number;
  /** Epoch ms of the next readiness probe of a ready runtime. */
  nextProbeAt: number;
  /** The desired generation this runtime was last confirmed under. */
  gen: number;
  /** The launch, restart, replacement or retirement in progress; null when none is. */
  work: Promise<void> | null;
  /** Set while a launch is on its way to ready: aborting it stops the runtime at once. */
  launch: Launch | null;
}

/** Where an invocation goes: a ready runtime, or why there is none (codes the relay retries on another replica). */
export type InvokeTarget =
  | { ok: true; handle: RuntimeHandle; adapter: RuntimeAdapter }
  | { ok: false; code: 'replica_draining' | 'runtime_unavailable'; message: string };

export interface SupervisorOptions {
  adapters: Record<Assignment['runtime']['kind'], RuntimeAdapter>;
  /** Called on every state change so the agent can report at once. */
  onChange: () => void;
  log: (event: string, fields: Record<string, unknown>) => void;
  /** In-flight invocations of a runtime, as the invocation runner counts them. */
  load: (assignmentId: string) => RuntimeLoad;
  /** Longest pause between two supervision passes (probes due sooner shorten it). */
  checkIntervalMs?: number;
  /** Longest wait for a draining runtime's in-flight invocations. */
  drainTimeoutMs?: number;
  /** How often runtime logs are rotated to stay within their bound on disk. */
  logRotateIntervalMs?: number;
}

/** Shortest pause between two supervision passes. */
const MIN_PASS_MS = 50;
/** Drains are rare and short: polling the runner's counts needs no hook from it into the supervisor. */
const DRAIN_POLL_MS = 50;

const errorMessage = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** `work`, or a rejection as soon as `signal` aborts; the work itself is left to settle unobserved. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    void work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * Makes local runtimes match the verified desired state through the runtime adapters: launches (adopting a
 * runtime that survived an agent restart), takes changes other than the template over in place, watches
 * liveness and readiness, restarts by policy, drains and retires runtimes that left the desired state, and keeps
 * their logs within bounds.
 */
export class Supervisor {
  private desired: Assignment[] = [];
  private gen = 0;
  private readonly managed = new Map<string, Managed>();
  private timer: NodeJS.Timeout | undefined;
  /** The pass in progress: shutdown waits for it. */
  private ticking: Promise<void> | null = null;
  /** A pass was asked for while one ran: it runs right after. */
  private tickAgain = false;
  private lastRotationAt = 0;
  /** The agent is shutting down: no new invocations, the machine reports `draining`. */
  private shuttingDown = false;
  /** Supervision has ended: nothing is launched any more. */
  private stopped = false;
  private stopRuntimesOnShutdown = false;
  /** The first desired state after start says which runtimes an earlier agent left are no longer wanted. */
  private orphansReleased = false;

  constructor(private readonly opts: SupervisorOptions) {}

  start(): void {
    this.schedule();
  }

  /** Adopts a new verified desired state. */
  apply(gen: number, assignments: Assignment[]): void {
    this.gen = gen;
    this.desired = assignments;
    if (!this.orphansReleased) {
      this.orphansReleased = true;
      const keep = new Set(assignments.map((a) => a.assignmentId));
      for (const adapter of new Set(Object.values(this.opts.adapters))) {
        void adapter
          .releaseOrphans?.(keep)
          .catch((error: unknown) => this.opts.log('stopping runtimes no longer desired failed', { error: errorMessage(error) }));
      }
    }
    // A runtime whose template is unchanged runs under the new generation as it is; one whose template changed
    // stays under its old generation until its replacement launches.
    for (const assignment of assignments) {
      const m = this.managed.get(assignment.assignmentId);
      if (m && m.assignment.templateHash === assignment.templateHash) m.gen = gen;
    }
    this.opts.onChange();
    this.tick();
  }

  reports(): RuntimeReport[] {
    const now = Date.now();
    return [...this.managed.values()].map((m) =>
      runtimeReport(
        {
          assignment: m.assignment,
          state: m.state,
          gen: m.gen,
          restarts: m.restarts,
          message: m.message,
          launchStartedAt: m.launch?.startedAt ?? null,
          pull: m.launch?.pull ?? null,
          load: this.opts.load(m.assignment.assignmentId),
        },
        now,
      ),
    );
  }

  status(): MachineStatus {
    return machineStatus(
      this.shuttingDown,
      [...this.managed.values()].map((m) => m.state),
    );
  }

  warmModels(): string[] {
    return warmModels([...this.managed.values()]);
  }

  /**
   * The ready runtime an invocation goes to. A draining one (retired, replaced, or the agent stopping) refuses
   * new work; the runner answers that before any head, so the relay retries on another replica.
   */
  readyHandle(assignmentId: string): InvokeTarget {
    const m = this.managed.get(assignmentId);
    if (this.shuttingDown || m?.state === 'draining')
      return { ok: false, code: 'replica_draining', message: 'this replica is draining: it takes no new invocations' };
    if (m?.state !== 'ready' || !m.handle)
      return { ok: false, code: 'runtime_unavailable', message: 'the runtime of this assignment is not ready on this node' };
    return { ok: true, handle: m.handle, adapter: this.adapter(m.assignment) };
  }

  /** The tail of a runtime's log, read from disk: a crashed or failed runtime's last lines too. */
  async logs(assignmentId: string, lines: number): Promise<string[]> {
    const m = this.managed.get(assignmentId);
    return m ? await this.adapter(m.assignment).logs(assignmentId, lines) : [];
  }

  /**
   * Stops supervising. New invocations are refused from now on; with `drain`, the in-flight ones get to finish
   * (bounded) first. With `stopRuntimes` the runtimes are stopped too, else they keep running for re-adoption.
   */
  async shutdown(opts: { stopRuntimes: boolean; drain: boolean }): Promise<void> {
    this.shuttingDown = true;
    this.opts.onChange();
    if (opts.drain) await this.drain([...this.managed.keys()]);
    this.stopped = true;
    this.stopRuntimesOnShutdown = opts.stopRuntimes;
    clearTimeout(this.timer);
    for (const m of this.managed.values()) m.launch?.controller.abort('shutdown' satisfies AbortReason);
    await this.ticking;
    await Promise.all([...this.managed.values()].map((m) => m.work));
    if (!opts.stopRuntimes) return;
    await Promise.all(
      [...this.managed.values()].map(async (m) => {
        if (!m.handle) return;
        await this.adapter(m.assignment)
          .stop(m.handle)
          .catch((error: unknown) => this.opts.log('runtime stop failed', { assignmentId: m.assignment.assignmentId, error: errorMessage(error) }));
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

  /** Marks the runtime failed; a restartable one is restarted by its policy after a backoff, another never (no `restartAfter`). */
  private fail(m: Managed, message: string, restartable = true) {
    m.handle = null;
    m.restartAfter = restartable ? Date.now() + restartDelayMs(m.assignment.restartPolicy, m.restarts) : null;
    this.set(m, 'failed', message);
  }

  private becameReady(m: Managed) {
    m.healthFailures = 0;
    m.nextProbeAt = Date.now() + m.assignment.startup.probeIntervalMs;
    this.set(m, 'ready');
  }

  /** The next pass: after the check interval, or sooner when a readiness probe is due. */
  private schedule(): void {
    clearTimeout(this.timer);
    if (this.stopped) return;
    const now = Date.now();
    let delay = this.opts.checkIntervalMs ?? 500;
    for (const m of this.managed.values()) if (m.state === 'ready' && !m.work) delay = Math.min(delay, m.nextProbeAt - now);
    this.timer = setTimeout(() => this.tick(), Math.max(MIN_PASS_MS, delay));
  }

  private tick(): void {
    if (this.stopped) return;
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    clearTimeout(this.timer);
    this.ticking = this.reconcile()
      .catch((error: unknown) => this.opts.log('supervision pass failed', { error: errorMessage(error) }))
      .finally(() => {
        this.ticking = null;
        if (!this.tickAgain) return this.schedule();
        this.tickAgain = false;
        this.tick();
      });
  }

  private async reconcile(): Promise<void> {
    await this.watch();
    await this.rotateLogsWhenDue();
    const managed: ManagedView[] = [...this.managed.values()].map((m) => ({
      assignment: m.assignment,
      state: m.state,
      busy: m.work !== null,
      launching: m.launch !== null,
      restarts: m.restarts,
      restartAfter: m.restartAfter,
    }));
    for (const action of planSupervision({ desired: this.desired, managed, now: Date.now() })) this.act(action);
  }

  private act(action: SupervisorAction): void {
    if (action.type === 'launch') {
      const m: Managed = {
        assignment: action.assignment,
        state: 'preparing',
        handle: null,
        restarts: 0,
        restartAfter: null,
        message: null,
        healthFailures: 0,
        nextProbeAt: 0,
        gen: this.gen,
        work: null,
        launch: null,
      };
      this.managed.set(action.assignment.assignmentId, m);
      this.opts.onChange();
      this.run(m, () => this.launch(m, true));
      return;
    }
    const assignmentId = action.type === 'update' || action.type === 'replace' ? action.assignment.assignmentId : action.assignmentId;
    const m = this.managed.get(assignmentId)!;
    if (action.type === 'update') {
      m.assignment = action.assignment;
      // A start timeout changed in place applies to the launch in progress too.
      this.armLaunchDeadline(m);
      this.opts.log('runtime updated in place', { assignmentId, deploymentGeneration: action.assignment.deploymentGeneration });
      this.opts.onChange();
    } else if (action.type === 'restart') {
      m.restarts += 1;
      this.run(m, () => this.launch(m, false));
    } else if (action.type === 'replace') {
      this.run(m, async () => {
        await this.retire(m, false);
        m.assignment = action.assignment;
        m.restarts = 0;
        m.gen = this.gen;
        await this.launch(m, false);
      });
    } else if (action.type === 'abort') {
      m.launch?.controller.abort('retired' satisfies AbortReason);
    } else {
      this.run(m, () => this.retire(m, true));
    }
  }

  private run(m: Managed, work: () => Promise<void>) {
    m.work = work()
      // A refused launch fails for good: restarting it would only be refused again.
      .catch((error: unknown) => {
        // The message goes to the control plane; what only this node's log may tell goes here.
        const detail = localDetail(error);
        if (detail !== undefined) this.opts.log('runtime launch failed', { assignmentId: m.assignment.assignmentId, detail });
        this.fail(m, errorMessage(error), !(error instanceof LaunchRefused));
      })
      .finally(() => {
        m.work = null;
        // What is left to do (retire an aborted launch, replace it) need not wait for the next pass.
        this.tick();
      });
  }

  /** Liveness and readiness of every ready runtime whose probe is due. */
  private async watch(): Promise<void> {
    const now = Date.now();
    await Promise.all(
      [...this.managed.values()].map(async (m) => {
        const handle = m.handle;
        if (m.work || m.state !== 'ready' || !handle || now < m.nextProbeAt) return;
        const adapter = this.adapter(m.assignment);
        m.nextProbeAt = now + m.assignment.startup.probeIntervalMs;
        if (!adapter.alive(handle)) return this.fail(m, 'runtime process exited');
        if (await adapter.ready(handle)) m.healthFailures = 0;
        else if (++m.healthFailures >= m.assignment.startup.failureThreshold) {
          // Failed either way; a stop that failed too is worth knowing before the restart launches another.
          await adapter
            .stop(handle)
            .catch((error: unknown) => this.opts.log('runtime stop failed', { assignmentId: m.assignment.assignmentId, error: errorMessage(error) }));
          this.fail(m, 'readiness probe failed');
        }
      }),
    );
  }

  private async rotateLogsWhenDue(): Promise<void> {
    const now = Date.now();
    if (now - this.lastRotationAt < (this.opts.logRotateIntervalMs ?? 1_000)) return;
    this.lastRotationAt = now;
    await Promise.all(
      [...this.managed.values()].map((m) =>
        this.adapter(m.assignment)
          .rotateLogs(m.assignment.assignmentId)
          // The runtime is not at fault: its log grows until the next rotation succeeds.
          .catch((error: unknown) => this.opts.log('runtime log rotation failed', { assignmentId: m.assignment.assignmentId, error: errorMessage(error) })),
      ),
    );
  }

  /**
   * Re-arms the start timeout of the launch in progress, from the assignment's current `startup.timeoutMs`. Held
   * while files are pulled: the timeout is about the runtime loading, however long a download takes.
   */
  private armLaunchDeadline(m: Managed): void {
    const launch = m.launch;
    if (!launch) return;
    clearTimeout(launch.timer);
    if (launch.pull) return;
    const remaining = Math.max(launch.startedAt + m.assignment.startup.timeoutMs, launch.graceUntil) - Date.now();
    launch.timer = setTimeout(() => launch.controller.abort('timeout' satisfies AbortReason), Math.max(0, remaining));
  }

  /** A prepare's download progress: the runtime is `pulling` from the first report on, its start timeout held. */
  private pulled(m: Managed, launch: Launch, progress: PullProgress): void {
    if (m.launch !== launch || launch.controller.signal.aborted) return;
    if (launch.pull) {
      launch.pull.bytesDone = progress.bytesDone;
      launch.pull.bytesTotal = progress.bytesTotal;
      return;
    }
    launch.pull = { since: Date.now(), ...progress };
    this.armLaunchDeadline(m);
    this.set(m, 'pulling');
  }

  /** The pull is over: its time does not count against the start timeout, which runs on from where it was held. */
  private pullEnded(m: Managed, launch: Launch): void {
    if (!launch.pull) return;
    launch.startedAt += Date.now() - launch.pull.since;
    launch.pull = null;
    this.armLaunchDeadline(m);
  }

  /**
   * Adopts the runtime an earlier agent left running, or prepares and starts a new one, then waits for it to be
   * ready. Abortable throughout: a runtime no longer wanted stops at once, however long its start timeout.
   */
  private async launch(m: Managed, mayAdopt: boolean): Promise<void> {
    if (this.stopped) return;
    const adapter = this.adapter(m.assignment);
    const launch: Launch = { controller: new AbortController(), startedAt: Date.now(), graceUntil: 0, timer: undefined, pull: null };
    const { signal } = launch.controller;
    m.launch = launch;
    this.armLaunchDeadline(m);
    try {
      let ready = false;
      // Not raced with the abort: a runtime it adopts must be known, so that an abort stops it.
      const adopted = mayAdopt ? await adapter.inspect(m.assignment) : null;
      if (adopted) {
        m.handle = adopted.handle;
        ready = adopted.ready;
        this.opts.log('runtime adopted', { assignmentId: m.assignment.assignmentId, pid: adopted.handle.pid, ready });
        // Still loading: its start timeout counts from when it was started, not from when this agent found it.
        // One started long ago may only be too busy to answer right now: it gets the probes a ready runtime gets.
        launch.startedAt = Math.min(launch.startedAt, Date.parse(adopted.handle.startedAt) || launch.startedAt);
        launch.graceUntil = Date.now() + m.assignment.startup.failureThreshold * m.assignment.startup.probeIntervalMs;
        this.armLaunchDeadline(m);
        if (!ready) this.set(m, 'starting');
      }
      signal.throwIfAborted();
      if (!m.handle) {
        this.set(m, 'preparing');
        await adapter.prepare(m.assignment, signal, (progress) => this.pulled(m, launch, progress));
        this.pullEnded(m, launch);
        signal.throwIfAborted();
        this.set(m, 'starting');
        m.handle = await adapter.start(m.assignment);
      }
      const handle = m.handle;
      while (!ready) {
        ready = await untilAborted(adapter.ready(handle), signal);
        if (ready) break;
        if (!adapter.alive(handle)) throw new Error('runtime process exited before it was ready');
        await sleep(m.assignment.startup.probeIntervalMs, undefined, { signal });
      }
      this.becameReady(m);
    } catch (error) {
      if (!signal.aborted) throw error;
      await this.abandon(m, signal.reason as AbortReason);
    } finally {
      clearTimeout(launch.timer);
      m.launch = null;
    }
  }

  /** Ends an aborted launch: its process stops at once (unless the agent leaves runtimes running as it stops). */
  private async abandon(m: Managed, reason: AbortReason): Promise<void> {
    // The launch goes on by itself and the next agent adopts the runtime.
    if (reason === 'shutdown' && !this.stopRuntimesOnShutdown) return;
    const handle = m.handle;
    m.handle = null;
    if (handle) await this.adapter(m.assignment).stop(handle);
    if (reason === 'timeout') throw new Error(`runtime did not become ready in time (start timeout ${m.assignment.startup.timeoutMs} ms)`);
    this.set(m, 'stopped', reason === 'retired' ? 'launch aborted: no longer desired as it was' : null);
  }

  /** Drains the runtime (new invocations refused, in-flight ones finish), stops it and, with `forget`, deletes what is left of it. */
  private async retire(m: Managed, forget: boolean): Promise<void> {
    const adapter = this.adapter(m.assignment);
    if (m.handle) {
      this.set(m, 'draining');
      await this.drain([m.assignment.assignmentId]);
      await adapter.stop(m.handle);
      m.handle = null;
    }
    this.set(m, 'stopped');
    if (!forget) return;
    await adapter.forget(m.assignment.assignmentId);
    this.managed.delete(m.assignment.assignmentId);
    this.opts.onChange();
  }

  /** Waits for the in-flight invocations of these runtimes to finish, within `drainUntil`'s bound. */
  private async drain(assignmentIds: string[]): Promise<void> {
    const loads = () => assignmentIds.map((id) => this.opts.load(id));
    const busy = () => loads().reduce((sum, l) => sum + l.queued + l.active, 0);
    const until = drainUntil(loads(), Date.now(), this.opts.drainTimeoutMs ?? 30_000);
    while (busy() > 0 && Date.now() < until) await sleep(DRAIN_POLL_MS);
    const cut = busy();
    if (cut > 0) this.opts.log('drain bound reached', { assignmentIds, invocations: cut });
  }
}
