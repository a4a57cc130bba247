import type { Counter, Gauge } from 'prom-client';

/**
 * The gauges an agent reports in its heartbeats (agent/agent.ts), the only names re-exposed: a machine that
 * invents names cannot grow the control plane's series (and memory) with them. A new agent metric is added here.
 */
const NODE_METRIC_NAMES: ReadonlySet<string> = new Set([
  'load1',
  'mem_free_mib',
  'invocations_active',
  'desired_rejected_total',
  'stream_malformed_total',
  'stream_connects_total',
  'heartbeat_failures_total',
]);

/**
 * `lunanexa_node_metric{workspace,machine,name}`, bounded: only the allow-listed names, and only of machines that report.
 * The series of a machine are removed when it is revoked or deleted (`keepOnly`, at each scrape) or when it has
 * not reported for a heartbeat lifetime (it is `down`: its last values say nothing of now).
 */
export class NodeMetrics {
  /** When each machine last reported, by `Date.now()`, and its workspace (the label its series carry). */
  private readonly seen = new Map<string, { at: number; workspace: string }>();

  constructor(
    private readonly gauge: Gauge<'workspace' | 'machine' | 'name'>,
    /** Names refused, counted without the name as a label (that would be the unbounded series again). */
    private readonly refused: Counter,
  ) {}

  /** Records a heartbeat's metrics, under the machine's workspace; names off the allow-list are counted and dropped. */
  report(machineId: string, workspace: string, metrics: Record<string, number>): void {
    this.seen.set(machineId, { at: Date.now(), workspace });
    let dropped = 0;
    for (const [name, value] of Object.entries(metrics)) {
      if (NODE_METRIC_NAMES.has(name)) this.gauge.set({ workspace, machine: machineId, name }, value);
      else dropped += 1;
    }
    if (dropped > 0) this.refused.inc(dropped);
  }

  /** The machines with series, for the scrape to check against the store. */
  machines(): string[] {
    return [...this.seen.keys()];
  }

  /** Removes every series of the machines not in `live`, and of those silent for `staleAfterMs`. */
  keepOnly(live: ReadonlySet<string>, staleAfterMs: number): void {
    const oldest = Date.now() - staleAfterMs;
    for (const [machineId, { at, workspace }] of this.seen) {
      if (live.has(machineId) && at >= oldest) continue;
      this.seen.delete(machineId);
      for (const name of NODE_METRIC_NAMES) this.gauge.remove({ workspace, machine: machineId, name });
    }
  }
}
