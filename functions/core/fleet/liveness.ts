import type { MachineLiveness, RuntimeLiveness } from '../../../shared/contracts/machine.js';
import type { RuntimeState } from '../../../shared/contracts/heartbeat.js';
import { machineStaleAfterMs, type ControlPlaneConfig } from '../../kernel/config.js';

type LivenessConfig = Pick<ControlPlaneConfig, 'heartbeatIntervalMs' | 'machineLifetimeMs' | 'runtimeTtlMs' | 'runtimeGraceMs'>;

/** The controller's tick record, which tells how long the control plane was away. */
export interface ControllerState {
  lastTickAt: Date | null;
  resumedAt: Date | null;
}

/**
 * Age of a report as the liveness rules count it. After a control-plane interruption (`resumedAt`), time
 * before the resumption is not held against a machine: it gets one full period to report again.
 */
export function effectiveAgeMs(reportedAt: Date, now: Date, resumedAt: Date | null): number {
  const seen = resumedAt && resumedAt > reportedAt ? resumedAt : reportedAt;
  return Math.max(0, now.getTime() - seen.getTime());
}

function reportedBefore(reportedAt: Date, resumedAt: Date | null): boolean {
  return resumedAt !== null && reportedAt < resumedAt;
}

/**
 * A machine's liveness (docs/design.md section 4): `ready` while its heartbeat is fresh, `stale` once it missed a
 * keep-alive and its grace, `down` once the heartbeat's 60 s lifetime lapsed. Pure: `now` is the database's clock.
 */
export function machineLiveness(input: {
  lastHeartbeatAt: Date | null;
  revokedAt: Date | null;
  now: Date;
  resumedAt: Date | null;
  config: LivenessConfig;
}): MachineLiveness {
  if (input.revokedAt) return 'revoked';
  if (!input.lastHeartbeatAt) return 'pending';
  const age = effectiveAgeMs(input.lastHeartbeatAt, input.now, input.resumedAt);
  if (age > input.config.machineLifetimeMs) return 'down';
  // A report from before the interruption says nothing about now: sight is lost until the next one.
  if (age > machineStaleAfterMs(input.config) || reportedBefore(input.lastHeartbeatAt, input.resumedAt)) return 'stale';
  return 'ready';
}

/**
 * A runtime's liveness: as reported while fresh; `stale` after its TTL plus grace; `down` after a further TTL.
 * It is never better than its machine's: a stale machine makes it stale, a down or revoked machine makes it down.
 * `stale` and `down` mean sight was lost, not that the runtime stopped.
 */
export function runtimeLiveness(input: {
  reportedState: RuntimeState;
  reportedAt: Date;
  machine: MachineLiveness;
  now: Date;
  resumedAt: Date | null;
  config: LivenessConfig;
}): RuntimeLiveness {
  if (input.machine === 'down' || input.machine === 'revoked' || input.machine === 'pending') return 'down';
  const age = effectiveAgeMs(input.reportedAt, input.now, input.resumedAt);
  const { runtimeTtlMs, runtimeGraceMs } = input.config;
  if (age > 2 * runtimeTtlMs + runtimeGraceMs) return 'down';
  if (age > runtimeTtlMs + runtimeGraceMs || input.machine === 'stale' || reportedBefore(input.reportedAt, input.resumedAt)) return 'stale';
  return input.reportedState;
}

/**
 * Strict routing (docs/design.md section 4): only a ready runtime on a ready, attached, unrevoked machine whose signed
 * desired state has not expired. Inventory and labels alone never make a runtime routable. A cordoned or
 * draining machine keeps serving (cordon only stops placements; drain retires a replica once its replacement
 * is ready); whether the report postdates the runtime's assignment is the snapshot's check.
 */
export function isRoutable(input: {
  runtime: RuntimeLiveness;
  machine: MachineLiveness;
  streamAttached: boolean;
  desiredExpiresAt: Date | null;
  now: Date;
}): boolean {
  return (
    input.runtime === 'ready' && input.machine === 'ready' && input.streamAttached && input.desiredExpiresAt !== null && input.desiredExpiresAt > input.now
  );
}

/**
 * When the controller has not ticked for longer than a machine lifetime beyond its own period, the control
 * plane was interrupted (stopped, or cut off from its store): missing heartbeats are not counted for one
 * period from the resumption, and reports from before it count as lost sight (`stale`), neither `ready` nor
 * `down`. Pure, so that every reader of the fleet judges it the same way from the first read after the
 * interruption, before the next tick records it. (The period matters on Workers, whose cron ticks once a minute.)
 */
export function nextResumedAt(input: {
  lastTickAt: Date | null;
  resumedAt: Date | null;
  now: Date;
  config: Pick<ControlPlaneConfig, 'machineLifetimeMs' | 'reconcileIntervalMs'>;
}): Date | null {
  const gap = input.lastTickAt ? input.now.getTime() - input.lastTickAt.getTime() : 0;
  if (gap > input.config.machineLifetimeMs + input.config.reconcileIntervalMs) return input.now;
  return input.resumedAt;
}
