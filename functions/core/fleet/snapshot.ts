import type { Inventory } from '../../../shared/contracts/inventory.js';
import type { EngineSample, GpuSample } from '../../../shared/contracts/telemetry.js';
import type { MachineStatus, RuntimeState, StartupProgress } from '../../../shared/contracts/heartbeat.js';
import type { MachineLiveness, RuntimeLiveness } from '../../../shared/contracts/machine.js';
import type { Assignment } from '../../../shared/contracts/desired.js';
import type { ControlPlaneConfig } from '../../kernel/config.js';
import { isRoutable, machineLiveness, nextResumedAt, runtimeLiveness, type ControllerState } from './liveness.js';
import { mayRestart } from '../../../shared/restart-policy.js';
import type { Track } from './tracks.js';
import { capacityOf, freeOn } from '../scheduler/place.js';

/** The rows the snapshot is built from, as the loader reads them (one consistent read). */
export interface FleetRows {
  now: Date;
  /** The controller's tick record: tells whether the control plane was interrupted, and since when it is back. */
  controller: ControllerState;
  machines: ReadonlyArray<{
    id: string;
    workspaceId: string;
    name: string;
    labels: Record<string, string>;
    inventory: Inventory;
    createdAt: Date;
    revokedAt: Date | null;
    cordoned: boolean;
    draining: boolean;
    /** Absent: not shared (rows built by hand before machines were shared). */
    shared?: boolean;
    /** Absent: none reported. */
    address?: string | null;
    lastHeartbeatAt: Date | null;
    reportedStatus: string | null;
    warmModels: string[];
    /** Absent: none (rows built by hand before versions were cached). */
    cachedVersions?: string[];
    /** Its GPUs as last sampled; absent: none (rows built by hand before telemetry). */
    gpus?: GpuSample[];
    reportedGen: number | null;
    desiredGen: number;
    desiredExpiresAt: Date | null;
  }>;
  /** Machine ids whose link is live: stream lease unexpired, its instance alive, its pings answered. */
  attached: ReadonlySet<string>;
  credentialExpiry: ReadonlyMap<string, Date>;
  assignments: ReadonlyArray<{ id: string; machineId: string; deploymentId: string; spec: Assignment; sinceGen: number }>;
  reports: ReadonlyArray<{
    machineId: string;
    assignmentId: string;
    deploymentId: string;
    state: string;
    gen: number;
    warm: boolean;
    activeInvocations: number;
    queueDepth: number;
    progress: StartupProgress | null;
    restarts: number;
    message: string | null;
    /** Absent: none (rows built by hand before engines were read). */
    engine?: EngineSample | null;
    reportedAt: Date;
  }>;
  /** What run workers reserve on each machine, from their placement until released; absent: none. */
  workers?: ReadonlyArray<{ machineId: string; gpus: number; memoryMiB: number; cores: number }>;
  /** Replica failures no operator cleared yet, of deployments not deleted. */
  replicaFailures: ReadonlyArray<FleetReplicaFailure & { machineId: string }>;
}

/** A replica that failed for good on a machine: the scheduler keeps its deployment off it until an operator clears the mark. */
interface FleetReplicaFailure {
  deploymentId: string;
  deploymentName: string;
  assignmentId: string;
  reason: string;
  failedAt: Date;
  /**
   * The template the replica failed with: a deployment whose template changed since (a fix) is tried there again,
   * while the mark stays on the machine for the operator until cleared. Scaling keeps the template.
   */
  templateHash: string | null;
}

/** A runtime as the control plane believes it now: its assignment (if still desired) joined with its last report. */
interface FleetRuntime {
  assignmentId: string;
  deploymentId: string;
  deploymentName: string;
  model: string;
  /** The assignment's template digest; null once the assignment left desired state (the runtime is retiring). */
  templateHash: string | null;
  /** The deployment generation its signed spec was written for; null once it left desired state. */
  deploymentGeneration: number | null;
  /** Which of its deployment's replica sets it belongs to (a retiring one without its spec counts as stable). */
  track: Track;
  /** The registry version it runs (`mv_...`); null when its deployment names none, or once it left desired state. */
  versionId: string | null;
  /** Still in desired state: false for a runtime the node still reports after its assignment was removed. */
  desired: boolean;
  reportedState: RuntimeState | null;
  state: RuntimeLiveness;
  gen: number | null;
  restarts: number;
  message: string | null;
  reportedAgeMs: number | null;
  routable: boolean;
  warm: boolean;
  activeInvocations: number;
  queueDepth: number;
  /** Its engine's metrics as its agent last read them; null when it has none. */
  engine: EngineSample | null;
  progress: StartupProgress | null;
  resources: { gpus: number; memoryMiB: number };
  /**
   * Why it failed for good: reported failed with no restart left by its assignment's restart policy, so its node
   * will not restart it. Null otherwise, a failed runtime that waits for its next restart included.
   */
  failure: string | null;
}

export interface FleetMachine {
  id: string;
  workspaceId: string;
  name: string;
  labels: Record<string, string>;
  inventory: Inventory;
  liveness: MachineLiveness;
  /** What the agent last said of itself. */
  reportedStatus: MachineStatus | null;
  streamAttached: boolean;
  heartbeatAgeMs: number | null;
  lastHeartbeatAt: Date | null;
  desiredGen: number;
  reportedGen: number | null;
  cordoned: boolean;
  draining: boolean;
  /** Lent to the fleet's run queue: runs of every workspace may place workers on it (docs/runs.md). */
  shared: boolean;
  /** The address other machines of its site reach it at, as its agent last reported; null when it reports none. */
  address: string | null;
  /** Draining and nothing left on it: no desired assignment, no runtime reported. */
  drained: boolean;
  revokedAt: Date | null;
  credentialExpiresAt: Date | null;
  createdAt: Date;
  runtimes: FleetRuntime[];
  /**
   * Resources held by its desired assignments and its run workers (kept while sight is lost: docs/design.md section
   * 4); `assignments` counts replicas only.
   */
  reserved: { gpus: number; memoryMiB: number; cores: number; assignments: number };
  /** What its run workers alone reserve, and how many they are. */
  workers: { gpus: number; memoryMiB: number; cores: number; count: number };
  /** Models loaded in a ready runtime, as the agent last reported (empty once sight is lost). */
  warmModels: string[];
  /** Model versions verified in its agent's cache, as it last reported (empty once sight is lost). */
  cachedVersions: string[];
  /** Its GPUs as its agent last sampled them (empty once sight is lost: an old sample says nothing of now). */
  gpus: GpuSample[];
  /** Its open replica failures, oldest first: shown to the operator, who clears them once the machine is fixed. */
  replicaFailures: FleetReplicaFailure[];
}

/** One read model of the fleet (docs/design.md section 6): routing, the controller, the scheduler and the API read it. */
export interface FleetSnapshot {
  now: Date;
  machines: FleetMachine[];
}

type LivenessConfig = Pick<ControlPlaneConfig, 'heartbeatIntervalMs' | 'machineLifetimeMs' | 'runtimeTtlMs' | 'runtimeGraceMs' | 'reconcileIntervalMs'>;

const MACHINE_STATUSES: readonly string[] = ['ready', 'degraded', 'draining'];

/** Builds the snapshot from its rows. Pure: liveness is judged against `rows.now`, the database's clock. */
export function buildFleetSnapshot(rows: FleetRows, config: LivenessConfig): FleetSnapshot {
  const { now } = rows;
  // Judged here rather than read from the last tick: the first read after an interruption already knows it.
  const resumedAt = nextResumedAt({ ...rows.controller, now, config });
  const assignmentsOf = new Map<string, FleetRows['assignments'][number][]>();
  for (const a of rows.assignments) assignmentsOf.set(a.machineId, [...(assignmentsOf.get(a.machineId) ?? []), a]);
  const reportsOf = new Map<string, FleetRows['reports'][number][]>();
  for (const r of rows.reports) reportsOf.set(r.machineId, [...(reportsOf.get(r.machineId) ?? []), r]);
  const workersOf = new Map<string, FleetMachine['workers']>();
  for (const w of rows.workers ?? []) {
    const sum = workersOf.get(w.machineId) ?? { gpus: 0, memoryMiB: 0, cores: 0, count: 0 };
    workersOf.set(w.machineId, { gpus: sum.gpus + w.gpus, memoryMiB: sum.memoryMiB + w.memoryMiB, cores: sum.cores + w.cores, count: sum.count + 1 });
  }
  const failuresOf = new Map<string, FleetReplicaFailure[]>();
  for (const { machineId, ...failure } of rows.replicaFailures) failuresOf.set(machineId, [...(failuresOf.get(machineId) ?? []), failure]);

  const machines = rows.machines.map((m): FleetMachine => {
    const liveness = machineLiveness({ lastHeartbeatAt: m.lastHeartbeatAt, revokedAt: m.revokedAt, now, resumedAt, config });
    const reportedStatus = m.reportedStatus && MACHINE_STATUSES.includes(m.reportedStatus) ? (m.reportedStatus as MachineStatus) : null;
    const attached = rows.attached.has(m.id);
    const assignments = new Map((assignmentsOf.get(m.id) ?? []).map((a) => [a.id, a]));
    const reports = new Map((reportsOf.get(m.id) ?? []).map((r) => [r.assignmentId, r]));
    const ids = [...new Set([...assignments.keys(), ...reports.keys()])].sort();
    const runtimes = ids.map((assignmentId): FleetRuntime => {
      const assignment = assignments.get(assignmentId);
      const report = reports.get(assignmentId);
      const state: RuntimeLiveness = report
        ? runtimeLiveness({ reportedState: report.state as RuntimeState, reportedAt: report.reportedAt, machine: liveness, now, resumedAt, config })
        : liveness === 'ready'
          ? 'preparing'
          : 'down';
      const routable =
        assignment !== undefined &&
        report !== undefined &&
        report.gen >= assignment.sinceGen &&
        reportedStatus !== 'draining' &&
        isRoutable({ runtime: state, machine: liveness, streamAttached: attached, desiredExpiresAt: m.desiredExpiresAt, now });
      return {
        assignmentId,
        deploymentId: assignment?.deploymentId ?? report!.deploymentId,
        deploymentName: assignment?.spec.deploymentName ?? '',
        model: assignment?.spec.model ?? '',
        templateHash: assignment?.spec.templateHash ?? null,
        deploymentGeneration: assignment?.spec.deploymentGeneration ?? null,
        track: assignment?.spec.track ?? 'stable',
        versionId: assignment?.spec.version?.versionId ?? null,
        desired: assignment !== undefined,
        reportedState: (report?.state as RuntimeState | undefined) ?? null,
        state,
        gen: report?.gen ?? null,
        restarts: report?.restarts ?? 0,
        message: report?.message ?? null,
        reportedAgeMs: report ? Math.max(0, now.getTime() - report.reportedAt.getTime()) : null,
        routable,
        warm: report?.warm ?? false,
        activeInvocations: report?.activeInvocations ?? 0,
        queueDepth: report?.queueDepth ?? 0,
        engine: report?.engine ?? null,
        progress: report?.progress ?? null,
        resources: assignment?.spec.resources ?? { gpus: 0, memoryMiB: 0 },
        failure:
          assignment !== undefined && report?.state === 'failed' && !mayRestart(assignment.spec.restartPolicy, report.restarts)
            ? `${report.message ?? 'failed'} after ${report.restarts} ${report.restarts === 1 ? 'restart' : 'restarts'}`
            : null,
      };
    });
    const desired = runtimes.filter((r) => r.desired);
    const workers = workersOf.get(m.id) ?? { gpus: 0, memoryMiB: 0, cores: 0, count: 0 };
    return {
      id: m.id,
      workspaceId: m.workspaceId,
      name: m.name,
      labels: m.labels,
      inventory: m.inventory,
      liveness,
      reportedStatus,
      streamAttached: attached,
      heartbeatAgeMs: m.lastHeartbeatAt ? Math.max(0, now.getTime() - m.lastHeartbeatAt.getTime()) : null,
      lastHeartbeatAt: m.lastHeartbeatAt,
      desiredGen: m.desiredGen,
      reportedGen: m.reportedGen,
      cordoned: m.cordoned,
      draining: m.draining,
      shared: m.shared ?? false,
      address: m.address ?? null,
      drained: m.draining && runtimes.length === 0,
      revokedAt: m.revokedAt,
      credentialExpiresAt: rows.credentialExpiry.get(m.id) ?? null,
      createdAt: m.createdAt,
      runtimes,
      reserved: {
        gpus: workers.gpus + desired.reduce((sum, r) => sum + r.resources.gpus, 0),
        memoryMiB: workers.memoryMiB + desired.reduce((sum, r) => sum + r.resources.memoryMiB, 0),
        cores: workers.cores,
        assignments: desired.length,
      },
      workers,
      // As the agent reported them, and only while that report is fresh.
      warmModels: liveness === 'ready' ? m.warmModels : [],
      cachedVersions: liveness === 'ready' ? (m.cachedVersions ?? []) : [],
      gpus: liveness === 'ready' ? (m.gpus ?? []) : [],
      replicaFailures: (failuresOf.get(m.id) ?? []).sort((a, b) => a.failedAt.getTime() - b.failedAt.getTime()),
    };
  });
  return { now, machines };
}

interface Amounts {
  gpus: number;
  memoryMiB: number;
  cores: number;
}

/**
 * What a machine offers (`capacityOf`), what its replicas and its run workers reserve of it, and what is left
 * (`freeOn`): the numbers placement decides with, for the operator. Pure.
 */
export function machineResources(m: Pick<FleetMachine, 'inventory' | 'reserved' | 'workers'>): {
  capacity: Amounts;
  replicas: Amounts;
  workers: Amounts;
  free: Amounts;
} {
  const amounts = ({ gpus, memoryMiB, cores }: Amounts): Amounts => ({ gpus, memoryMiB, cores });
  const { reserved, workers } = m;
  return {
    capacity: amounts(capacityOf(m.inventory)),
    replicas: { gpus: reserved.gpus - workers.gpus, memoryMiB: reserved.memoryMiB - workers.memoryMiB, cores: reserved.cores - workers.cores },
    workers: amounts(workers),
    free: amounts(freeOn(m)),
  };
}

/** What placement reads of a machine, whatever it places there (a replica, a run's worker). */
export function placementFields(m: FleetMachine) {
  return {
    id: m.id,
    labels: m.labels,
    liveness: m.liveness,
    cordoned: m.cordoned,
    draining: m.draining,
    inventory: m.inventory,
    warmModels: m.warmModels,
    cachedVersions: m.cachedVersions,
  };
}
