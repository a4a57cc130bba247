import type { ControlPlaneConfig } from '../../functions/kernel/config.js';

/** Intervals a test harness uses so that liveness transitions take seconds, not minutes. */
export const FAST_TEST_CONFIG: Partial<ControlPlaneConfig> = {
  heartbeatIntervalMs: 250,
  machineLifetimeMs: 2_500,
  runtimeTtlMs: 2_500,
  runtimeGraceMs: 500,
  streamKeepAliveMs: 250,
  streamLeaseTtlMs: 1_500,
  reconcileIntervalMs: 250,
  routingRefreshMs: 100,
  invokeAckTimeoutMs: 3_000,
  streamPingMs: 500,
  // Long: suites drive machines by hand over HTTP and do not answer pings; the suites about pings shorten it.
  streamPingTimeoutMs: 20_000,
  // Suites sign in to the console many times a minute from one address; the suite about throttling lowers it.
  consoleSignInPerMinute: 10_000,
};
