import type { GpuDevice } from '../../shared/contracts/inventory.js';
import { type EngineSample, type GpuSample, MAX_GPU_SAMPLES } from '../../shared/contracts/telemetry.js';
import type { Log } from '../log.js';
import { parseEngineMetrics } from './engine-metrics.js';

/** A runtime whose engine metrics can be read now (ready, with a `metricsPath`). */
export interface EngineSource {
  assignmentId: string;
  read(): Promise<string | null>;
}

export interface TelemetrySamplerOptions {
  /** How often GPUs and engines are read; the heartbeats carry the latest sample. */
  intervalMs: number;
  gpus: () => Promise<GpuDevice[]>;
  engines: () => EngineSource[];
  log: Log;
}

/** The telemetry columns of an inventory row, bounded as the heartbeat's contract bounds them. Pure. */
export function gpuSample(gpu: GpuDevice): GpuSample {
  return {
    index: gpu.index,
    utilizationPercent: gpu.utilizationPercent,
    memoryUsedMiB: gpu.memoryUsedMiB,
    memoryTotalMiB: gpu.memoryTotalMiB,
    temperatureC: gpu.temperatureC,
    powerDrawW: gpu.powerDrawW,
  };
}

/**
 * Reads the machine's GPUs and its runtimes' engines on a timer of its own, apart from the heartbeats, so that a
 * slow nvidia-smi or a busy runtime never delays a report: each heartbeat takes the latest sample as it is. A read
 * that fails leaves nothing (never the last value passed off as current).
 */
export class TelemetrySampler {
  private gpuSamples: GpuSample[] = [];
  private readonly engineSamples = new Map<string, EngineSample>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private gpuFailureLogged = false;

  constructor(private readonly opts: TelemetrySamplerOptions) {}

  start(): void {
    if (this.opts.intervalMs <= 0) return;
    void this.sampleAndSchedule();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  gpus(): GpuSample[] {
    return this.gpuSamples;
  }

  engine(assignmentId: string): EngineSample | null {
    return this.engineSamples.get(assignmentId) ?? null;
  }

  private async sampleAndSchedule(): Promise<void> {
    await Promise.all([this.sampleGpus(), this.sampleEngines()]);
    if (!this.closed) this.timer = setTimeout(() => void this.sampleAndSchedule(), this.opts.intervalMs);
  }

  private async sampleGpus(): Promise<void> {
    try {
      this.gpuSamples = (await this.opts.gpus()).slice(0, MAX_GPU_SAMPLES).map(gpuSample);
      this.gpuFailureLogged = false;
    } catch (error) {
      this.gpuSamples = [];
      // Once per run of failures: a broken driver must not fill the log every few seconds.
      if (!this.gpuFailureLogged) this.opts.log('gpu telemetry unreadable', { error: String(error) });
      this.gpuFailureLogged = true;
    }
  }

  private async sampleEngines(): Promise<void> {
    const sources = this.opts.engines();
    const read = await Promise.all(sources.map(async (source) => [source.assignmentId, await source.read().catch(() => null)] as const));
    this.engineSamples.clear();
    for (const [assignmentId, text] of read) {
      const sample = text === null ? null : parseEngineMetrics(text);
      if (sample) this.engineSamples.set(assignmentId, sample);
    }
  }
}
