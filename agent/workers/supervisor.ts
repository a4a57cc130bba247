import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import { PROCESS_NOT_FOUND, type WorkerReport, type WorkerReportedState } from '../../shared/contracts/worker.js';
import type { AgentPolicy } from '../policy.js';
import type { RuntimeUsers } from '../runtime-user.js';
import type { MachineHolds } from '../runtimes/holds.js';
import { LogRing } from '../runtimes/log-ring.js';
import { stopGroup } from '../runtimes/process-group.js';
import { holderOf, prepareWorker, spawnWorker, type PreparedWorker } from './launch.js';
import { exitReport, planWorkers, workerReports, type WorkerAction } from './plan.js';
import { loadWorkerLogIds, loadWorkerRecords, processStartTicks, removeWorkerRecord, saveWorkerRecord, workerLogPath, type WorkerRecord } from './records.js';

interface Worker {
  workerId: string;
  attempt: number;
  state: WorkerReportedState;
  exitCode: number | null;
  message: string | null;
  /** Its uid and GPUs, held from its prepare until its process ends. */
  prepared: PreparedWorker | null;
  /** Set while its process runs (started here, or adopted). */
  record: WorkerRecord | null;
  /** Adopted from an earlier agent: not this agent's child, so its end is seen by polling, without its status. */
  adopted: boolean;
  /** The prepare, start or stop in progress. */
  work: Promise<void> | null;
}

export interface WorkerSupervisorOptions {
  stateDir: string;
  policy: AgentPolicy;
  users: RuntimeUsers | null;
  /** Shared with the runtimes' adapter: a worker gets no GPU or uid a runtime holds. */
  holds: MachineHolds;
  /** Called on every state change so the agent can report at once. */
  onChange: () => void;
  log: (event: string, fields?: Record<string, unknown>) => void;
  /** Between SIGTERM and SIGKILL when a worker is stopped. */
  stopGraceMs?: number;
  /** How often adopted workers are looked at and logs rotated. */
  checkIntervalMs?: number;
  /** How many finished workers' logs are kept after they leave the desired state (the most recent ones). */
  keptLogs?: number;
  /**
   * The variables of a worker that is a job's runner (`WorkerAssignment.job`), asked of the control plane when it
   * starts (its token among them, never in the desired state); a refusal fails the worker.
   */
  jobEnv: (assignment: WorkerAssignment & { job: { id: string } }) => Promise<Record<string, string>>;
}

const errorMessage = (error: unknown) => (error instanceof Error ? error.message : String(error));

/**
 * Runs a run's workers as processes beside the runtimes (docs/runs.md): each from a template the local policy allows,
 * as a uid of its own with its own GPUs, prepared first and started when its phase says so, replaced by a higher
 * attempt, stopped when it leaves the desired state, never restarted by itself. Records survive an agent restart:
 * a worker still running is adopted, one gone is reported `failed` ("process not found").
 */
export class WorkerSupervisor {
  private desired: WorkerAssignment[] = [];
  /** No worker is stopped for not being desired before the first desired state says which are. */
  private received = false;
  private readonly workers = new Map<string, Worker>();
  private readonly rings = new Map<string, LogRing>();
  /** Finished workers whose log is kept (no longer desired, their process gone), oldest first. */
  private kept: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly opts: WorkerSupervisorOptions) {}

  /**
   * Takes over the workers an earlier agent left: adopted when their process still runs, else failed. Before any
   * desired state is applied: one applied first would start another process for a worker still running.
   */
  async recover(): Promise<void> {
    for (const record of await loadWorkerRecords(this.opts.stateDir, this.opts.log)) {
      const found = (await processStartTicks(record.pid)) === record.startTicks && record.startTicks !== 0;
      const worker = this.newWorker(record.workerId, record.attempt);
      if (found) {
        this.opts.holds.adopt(holderOf(record.workerId), record);
        Object.assign(worker, { state: 'running', record, adopted: true });
        this.opts.log('worker adopted', { workerId: record.workerId, attempt: record.attempt, pid: record.pid });
      } else {
        Object.assign(worker, { state: 'failed', message: PROCESS_NOT_FOUND });
        await removeWorkerRecord(this.opts.stateDir, record.workerId);
        this.opts.log('worker not found', { workerId: record.workerId, attempt: record.attempt, pid: record.pid });
      }
      this.workers.set(record.workerId, worker);
    }
    // Every other log on disk is a finished worker's: kept, within the bound, as this agent's own are.
    this.kept = (await loadWorkerLogIds(this.opts.stateDir)).filter((id) => !this.workers.has(id));
    await this.pruneKept();
  }

  /** Watches adopted workers and rotates logs from now on. */
  start(): void {
    this.timer = setInterval(() => void this.check(), this.opts.checkIntervalMs ?? 1_000);
    this.timer.unref();
  }

  apply(workers: WorkerAssignment[]): void {
    this.desired = workers;
    this.received = true;
    this.reconcile();
  }

  reports(): WorkerReport[] {
    return workerReports(
      [...this.workers.values()].map((w) => ({ workerId: w.workerId, attempt: w.attempt, state: w.state, exitCode: w.exitCode, message: w.message })),
    );
  }

  /**
   * Whether `id` names a worker this agent knows, or one that finished here and whose log it keeps (a `logs`
   * request may name one instead of a runtime).
   */
  has(id: string): boolean {
    return this.workers.has(id) || this.kept.includes(id);
  }

  async logs(workerId: string, lines: number): Promise<string[]> {
    return await this.ring(workerId).tail(lines);
  }

  /** Keeps a finished worker's log, and deletes the oldest kept beyond the bound. */
  private async keep(workerId: string): Promise<void> {
    this.kept = [...this.kept.filter((id) => id !== workerId), workerId];
    await this.pruneKept();
  }

  private async pruneKept(): Promise<void> {
    const over = this.kept.length - (this.opts.keptLogs ?? 64);
    if (over <= 0) return;
    const gone = this.kept.slice(0, over);
    this.kept = this.kept.slice(over);
    for (const id of gone) await this.forgetLog(id);
  }

  private async forgetLog(workerId: string): Promise<void> {
    await this.ring(workerId).remove();
    this.rings.delete(workerId);
  }

  /** Stops supervising; with `stopWorkers` their processes stop too, else they run on for the next agent to adopt. */
  async shutdown(opts: { stopWorkers: boolean }): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await Promise.all([...this.workers.values()].map((w) => w.work));
    if (opts.stopWorkers) await Promise.all([...this.workers.values()].map((w) => this.stopProcess(w)));
  }

  private newWorker(workerId: string, attempt: number): Worker {
    return { workerId, attempt, state: 'preparing', exitCode: null, message: null, prepared: null, record: null, adopted: false, work: null };
  }

  private ring(workerId: string): LogRing {
    let ring = this.rings.get(workerId);
    if (!ring) this.rings.set(workerId, (ring = new LogRing(workerLogPath(this.opts.stateDir, workerId))));
    return ring;
  }

  private set(w: Worker, state: WorkerReportedState, fields: { exitCode?: number | null; message?: string | null } = {}): void {
    w.state = state;
    w.exitCode = fields.exitCode ?? null;
    w.message = fields.message ?? null;
    this.opts.log('worker state', { workerId: w.workerId, attempt: w.attempt, state, exitCode: w.exitCode, message: w.message });
    this.opts.onChange();
  }

  private reconcile(): void {
    if (this.stopped || !this.received) return;
    const views = [...this.workers.values()].map((w) => ({ workerId: w.workerId, attempt: w.attempt, state: w.state, busy: w.work !== null }));
    for (const action of planWorkers(this.desired, views)) this.act(action);
  }

  private act(action: WorkerAction): void {
    if (action.type === 'stop') {
      const w = this.workers.get(action.workerId)!;
      return this.run(w, async () => {
        await this.stopProcess(w);
        this.workers.delete(w.workerId);
        // Its log stays readable (`runs logs` after its run ended), among the most recent finished ones.
        this.rings.delete(w.workerId);
        await this.keep(w.workerId);
        this.opts.onChange();
      });
    }
    const { assignment } = action;
    if (action.type === 'start') return this.run(this.workers.get(assignment.workerId)!, (w) => this.spawn(w, assignment));
    if (action.type === 'prepare') {
      const w = this.newWorker(assignment.workerId, assignment.attempt);
      this.workers.set(w.workerId, w);
      this.opts.onChange();
      // Placed here again (its run restarted): it starts a new log, not the kept one of its earlier placement.
      const again = this.kept.includes(w.workerId);
      this.kept = this.kept.filter((id) => id !== w.workerId);
      return this.run(w, async () => {
        if (again) await this.forgetLog(w.workerId);
        await this.prepare(w, assignment);
      });
    }
    const w = this.workers.get(assignment.workerId)!;
    this.run(w, async () => {
      await this.stopProcess(w);
      Object.assign(w, this.newWorker(w.workerId, assignment.attempt), { work: w.work });
      this.opts.onChange();
      await this.prepare(w, assignment);
    });
  }

  private run(w: Worker, work: (w: Worker) => Promise<void>): void {
    w.work = work(w)
      .catch((error: unknown) => {
        if (w.prepared && !w.record) this.release(w);
        this.set(w, 'failed', { message: errorMessage(error) });
      })
      .finally(() => {
        w.work = null;
        this.reconcile();
      });
  }

  private async prepare(w: Worker, assignment: WorkerAssignment): Promise<void> {
    w.prepared = await prepareWorker(assignment, { policy: this.opts.policy, users: this.opts.users, holds: this.opts.holds });
    this.set(w, 'ready-to-start');
    if (assignment.phase === 'start') await this.spawn(w, assignment);
  }

  private async spawn(w: Worker, assignment: WorkerAssignment): Promise<void> {
    if (this.stopped) return;
    this.set(w, 'starting');
    /** An end seen before its record was saved waits for it, so that no record outlives its process. */
    const early: Array<ReturnType<typeof exitReport>> = [];
    let recorded = false;
    const jobEnv = assignment.job ? await this.opts.jobEnv({ ...assignment, job: assignment.job }) : {};
    const record = await spawnWorker(assignment, w.prepared!, { stateDir: this.opts.stateDir, jobEnv }, (code, signal) => {
      const report = exitReport(code, signal);
      if (!recorded) early.push(report);
      // Not when it was stopped (its record is gone already) or replaced.
      else if (w.record === record) void this.ended(w, report);
    });
    this.opts.holds.started(holderOf(w.workerId), record.pid);
    await saveWorkerRecord(this.opts.stateDir, record);
    recorded = true;
    w.record = record;
    this.set(w, 'running');
    this.opts.log('worker started', { workerId: w.workerId, attempt: w.attempt, pid: record.pid, uid: record.uid, gpuIndices: record.gpuIndices });
    const first = early[0];
    if (first) await this.ended(w, first);
  }

  /** Its process ended by itself: reported, its record and holds released. */
  private async ended(w: Worker, report: ReturnType<typeof exitReport>): Promise<void> {
    this.release(w);
    this.set(w, report.state, report);
    await removeWorkerRecord(this.opts.stateDir, w.workerId);
  }

  private release(w: Worker): void {
    w.record = null;
    w.prepared = null;
    w.adopted = false;
    this.opts.holds.release(holderOf(w.workerId));
  }

  /** Stops its process if it runs (SIGTERM, SIGKILL after the grace) and releases what it holds. */
  private async stopProcess(w: Worker): Promise<void> {
    const record = w.record;
    this.release(w);
    if (!record) return;
    this.opts.log('stopping worker', { workerId: w.workerId, attempt: w.attempt, pid: record.pid });
    await stopGroup(record.pid, this.opts.stopGraceMs ?? 10_000);
    await removeWorkerRecord(this.opts.stateDir, w.workerId);
  }

  /** Adopted workers that ended (their status is lost with their parent), and log rotation. */
  private async check(): Promise<void> {
    for (const w of this.workers.values()) {
      const record = w.record;
      if (w.adopted && record && !w.work && (await processStartTicks(record.pid)) !== record.startTicks) {
        await this.ended(w, { state: 'failed', exitCode: null, message: 'ended after the agent restarted: its exit status is unknown' });
      }
      await this.ring(w.workerId)
        .rotate()
        .catch((error: unknown) => this.opts.log('worker log rotation failed', { workerId: w.workerId, error: errorMessage(error) }));
    }
  }
}
