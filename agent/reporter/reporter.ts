import { HeartbeatResponse, type Heartbeat } from '../../shared/contracts/heartbeat.js';
import type { ServerClock } from '../link/clock.js';
import type { SignedClient } from '../link/http.js';
import type { Log } from '../log.js';
import { afterReportFailure, firstReportDelayMs, keepAliveDelayMs, retryDelayMs } from './schedule.js';

/** Shortest spacing of heartbeats sent on a change: a burst of changes (invocations under load) becomes one report. */
const REPORT_SPACING_MS = 250;
/**
 * Spacing of the reports of a load that only moved (no runtime went idle or busy): the autoscaler's samples see
 * the load within about a second, and a busy machine sends at most one heartbeat a second for it.
 */
export const LOAD_REPORT_SPACING_MS = 1_000;

export interface ReporterOptions {
  client: Pick<SignedClient, 'request'>;
  clock: Pick<ServerClock, 'resync'>;
  /** The keep-alive interval until a reply names another. */
  intervalMs: number;
  /** This machine's fresh observations, for the heartbeat sent now. */
  observe: () => Omit<Heartbeat, 'bootId' | 'seq'>;
  /** The control plane accepted a heartbeat: its reply names the generation it holds. */
  onAccepted: (reply: HeartbeatResponse) => void;
  /** The control plane revoked this machine. */
  onRevoked: () => void;
  /** After each keep-alive's report: the chores that ride on its schedule. */
  afterKeepAlive: () => Promise<void>;
  counters: { heartbeat_failures_total: number };
  log: Log;
}

/**
 * The heartbeats: a keep-alive every interval (jittered), a report soon after each change (spaced), and a failed
 * report retried with backoff unless the next keep-alive comes first and supersedes it. Reports never overlap:
 * one asked for while another is in flight is sent after it.
 */
export class Reporter {
  private readonly bootId = crypto.randomUUID();
  private seq = 0;
  private intervalMs: number;
  private closed = false;
  private reporting: Promise<void> | null = null;
  private reportAgain = false;
  private lastReportAt = 0;
  /** Consecutive failed reports: the backoff of their retries. */
  private failedReports = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private reportTimer: NodeJS.Timeout | undefined;
  /** Date.now() the scheduled change report is due at. */
  private reportDueAt = 0;
  private keepAliveTimer: NodeJS.Timeout | undefined;
  /** performance.now() of the next keep-alive, which supersedes a retry due after it. */
  private nextKeepAliveAt = 0;

  constructor(private readonly opts: ReporterOptions) {
    this.intervalMs = opts.intervalMs;
  }

  /** Agents started together (a power cut, a control-plane restart) spread their first reports. */
  start(): void {
    this.scheduleKeepAlive(firstReportDelayMs(this.intervalMs));
  }

  /** Reports now (after the report in flight, if any). */
  report(): Promise<void> {
    if (this.reporting) {
      this.reportAgain = true;
      return this.reporting;
    }
    this.reporting = this.reportUntilCurrent().finally(() => (this.reporting = null));
    return this.reporting;
  }

  /**
   * Reports a change at once, but at most every `spacingMs` (REPORT_SPACING_MS by default) after the last report; a
   * report due sooner is kept. Bound: it is handed around as a callback.
   */
  readonly soon = (spacingMs = REPORT_SPACING_MS): void => {
    if (this.closed) return;
    const dueAt = this.lastReportAt + spacingMs;
    if (this.reportTimer) {
      if (this.reportDueAt <= dueAt) return;
      clearTimeout(this.reportTimer);
    }
    this.reportDueAt = dueAt;
    this.reportTimer = setTimeout(
      () => {
        this.reportTimer = undefined;
        void this.report();
      },
      Math.max(0, dueAt - Date.now()),
    );
  };

  /** Schedules no more reports; one in flight or due still goes out. */
  halt(): void {
    this.closed = true;
  }

  /** Schedules no more reports, cancels the due ones and waits for the one in flight. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.keepAliveTimer);
    clearTimeout(this.retryTimer);
    clearTimeout(this.reportTimer);
    await this.reporting;
  }

  /** Sends one heartbeat of fresh observations; after a failure, says whether to retry. */
  private async send(): Promise<'sent' | ReturnType<typeof afterReportFailure>> {
    const { opts } = this;
    const heartbeat: Heartbeat = { ...opts.observe(), bootId: this.bootId, seq: ++this.seq };
    const result = await opts.client.request('POST', '/agent/v1/heartbeat', heartbeat, HeartbeatResponse);
    if (result.success) {
      this.intervalMs = result.data.heartbeatIntervalMs;
      opts.onAccepted(result.data);
      return 'sent';
    }
    opts.counters.heartbeat_failures_total += 1;
    opts.log('heartbeat rejected', { status: result.status, code: result.error.code, message: result.error.message });
    if (result.error.code === 'machine_revoked') opts.onRevoked();
    return afterReportFailure({ status: result.status, code: result.error.code });
  }

  private retry(): void {
    const delayMs = retryDelayMs(this.failedReports, this.nextKeepAliveAt - performance.now(), this.intervalMs);
    if (delayMs === null || this.closed) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.report();
    }, delayMs);
  }

  private async reportUntilCurrent(): Promise<void> {
    do {
      this.reportAgain = false;
      // This report supersedes a retry that was waiting.
      clearTimeout(this.retryTimer);
      this.retryTimer = undefined;
      this.lastReportAt = Date.now();
      const outcome = await this.send();
      if (outcome === 'sent') this.failedReports = 0;
      else if (outcome !== 'drop') {
        this.failedReports += 1;
        if (outcome === 'resync') await this.opts.clock.resync('the control plane refused a heartbeat for clock skew');
        this.retry();
      }
    } while (this.reportAgain && !this.closed);
  }

  /** The next keep-alive, `delayMs` from now; reports in between (changes, retries) do not move it. */
  private scheduleKeepAlive(delayMs: number): void {
    this.nextKeepAliveAt = performance.now() + delayMs;
    this.keepAliveTimer = setTimeout(() => void this.keepAlive(), delayMs);
  }

  private async keepAlive(): Promise<void> {
    if (this.closed) return;
    // Set before reporting: a retry of this report must know when the next keep-alive supersedes it.
    this.nextKeepAliveAt = performance.now() + keepAliveDelayMs(this.intervalMs);
    await this.report();
    await this.opts.afterKeepAlive();
    if (!this.closed) this.scheduleKeepAlive(Math.max(0, this.nextKeepAliveAt - performance.now()));
  }
}
