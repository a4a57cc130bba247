import type { Counter, Gauge } from 'prom-client';
import type { EngineSample, GpuSample } from '../../../shared/contracts/telemetry.js';

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

/** The GPU columns re-exposed, by their series name: fixed, as the heartbeat's contract fixes the sample. */
const GPU_NAMES = {
  utilization_percent: 'utilizationPercent',
  memory_used_mib: 'memoryUsedMiB',
  memory_total_mib: 'memoryTotalMiB',
  temperature_c: 'temperatureC',
  power_w: 'powerDrawW',
} as const satisfies Record<string, keyof GpuSample>;

/** The engine fields re-exposed, by their series name. */
const ENGINE_NAMES = {
  requests_running: 'requestsRunning',
  requests_waiting: 'requestsWaiting',
  kv_cache_usage: 'kvCacheUsage',
  prompt_tokens_total: 'promptTokensTotal',
  generation_tokens_total: 'generationTokensTotal',
} as const satisfies Record<string, keyof EngineSample>;

/** The series of one machine's GPUs and engines as last reported: what a later report or a cleanup removes. */
interface Reported {
  at: number;
  workspace: string;
  gpus: number[];
  engines: string[];
}

/**
 * `lunanexa_node_metric{workspace,machine,name}`, bounded: only the allow-listed names, and only of machines that report.
 * The series of a machine are removed when it is revoked or deleted (`keepOnly`, at each scrape) or when it has
 * not reported for a heartbeat lifetime (it is `down`: its last values say nothing of now).
 */
export class NodeMetrics {
  /** When each machine last reported, by `Date.now()`, its workspace (the label its series carry), its GPUs and engines. */
  private readonly seen = new Map<string, Reported>();

  constructor(
    private readonly gauge: Gauge<'workspace' | 'machine' | 'name'>,
    /** Names refused, counted without the name as a label (that would be the unbounded series again). */
    private readonly refused: Counter,
    /** `lunanexa_node_gpu{workspace,machine,gpu,name}` and `lunanexa_runtime_engine{workspace,machine,assignment,name}`. */
    private readonly telemetry: { gpu: Gauge<'workspace' | 'machine' | 'gpu' | 'name'>; engine: Gauge<'workspace' | 'machine' | 'assignment' | 'name'> },
  ) {}

  /**
   * Records a heartbeat's metrics, under the machine's workspace; names off the allow-list are counted and dropped.
   * Its GPUs' and engines' telemetry replaces what the machine reported before (a value it no longer reports is no
   * series, rather than an old number).
   */
  report(
    machineId: string,
    workspace: string,
    metrics: Record<string, number>,
    telemetry: { gpus: readonly GpuSample[]; engines: ReadonlyArray<{ assignmentId: string; engine: EngineSample | null }> } = { gpus: [], engines: [] },
  ): void {
    const previous = this.seen.get(machineId);
    if (previous) this.removeTelemetry(machineId, previous);
    const gpus = telemetry.gpus.map((g) => g.index);
    const engines = telemetry.engines.filter((e) => e.engine !== null).map((e) => e.assignmentId);
    this.seen.set(machineId, { at: Date.now(), workspace, gpus, engines });
    for (const gpu of telemetry.gpus) {
      for (const [name, field] of Object.entries(GPU_NAMES)) {
        const value = gpu[field];
        if (value !== null) this.telemetry.gpu.set({ workspace, machine: machineId, gpu: String(gpu.index), name }, value);
      }
    }
    for (const { assignmentId, engine } of telemetry.engines) {
      if (!engine) continue;
      for (const [name, field] of Object.entries(ENGINE_NAMES)) {
        const value = engine[field];
        if (value !== null) this.telemetry.engine.set({ workspace, machine: machineId, assignment: assignmentId, name }, value);
      }
    }
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
    for (const [machineId, reported] of this.seen) {
      if (live.has(machineId) && reported.at >= oldest) continue;
      this.seen.delete(machineId);
      for (const name of NODE_METRIC_NAMES) this.gauge.remove({ workspace: reported.workspace, machine: machineId, name });
      this.removeTelemetry(machineId, reported);
    }
  }

  private removeTelemetry(machineId: string, { workspace, gpus, engines }: Reported): void {
    for (const gpu of gpus) for (const name of Object.keys(GPU_NAMES)) this.telemetry.gpu.remove({ workspace, machine: machineId, gpu: String(gpu), name });
    for (const assignment of engines)
      for (const name of Object.keys(ENGINE_NAMES)) this.telemetry.engine.remove({ workspace, machine: machineId, assignment, name });
  }
}
