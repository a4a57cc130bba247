import { freemem, loadavg } from 'node:os';
import type { Heartbeat } from '../../shared/contracts/heartbeat.js';
import type { Supervisor } from '../supervisor/supervisor.js';
import type { WorkerSupervisor } from '../workers/supervisor.js';
import type { TelemetrySampler } from '../telemetry/sampler.js';

/** The counters the heartbeats carry, kept by the parts that count. */
export interface AgentCounters {
  desired_rejected_total: number;
  stream_malformed_total: number;
  stream_connects_total: number;
  heartbeat_failures_total: number;
}

/** What a heartbeat says of this machine now, besides its boot and sequence. */
export function observeMachine(parts: {
  machineId: string;
  supervisor: Pick<Supervisor, 'status' | 'reports' | 'warmModels'>;
  workers: Pick<WorkerSupervisor, 'reports'>;
  address: string | null;
  heldGen: number;
  cachedVersions: string[];
  invocationsActive: number;
  counters: AgentCounters;
  telemetry: Pick<TelemetrySampler, 'gpus' | 'engine'>;
}): Omit<Heartbeat, 'bootId' | 'seq'> {
  const { supervisor, telemetry } = parts;
  return {
    machineId: parts.machineId,
    status: supervisor.status(),
    gen: parts.heldGen,
    runtimes: supervisor.reports().map((r) => ({ ...r, engine: telemetry.engine(r.assignmentId) })),
    workers: parts.workers.reports(),
    address: parts.address,
    warmModels: supervisor.warmModels(),
    cachedVersions: parts.cachedVersions,
    gpus: telemetry.gpus(),
    metrics: { load1: loadavg()[0] ?? 0, mem_free_mib: Math.round(freemem() / 1048576), invocations_active: parts.invocationsActive, ...parts.counters },
  };
}
