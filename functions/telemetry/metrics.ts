import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The control plane's metrics; one registry per app so several instances can share a process in tests. */
export function createMetrics(opts: { processMetrics?: boolean } = {}) {
  const registry = new Registry();
  if (opts.processMetrics) collectDefaultMetrics({ register: registry, prefix: 'lunanexa_' });
  return {
    registry,
    agentAuthFailures: new Counter({
      name: 'lunanexa_agent_auth_failures_total',
      help: 'Agent requests rejected by machine authentication, by reason',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    enrollments: new Counter({
      name: 'lunanexa_enrollments_total',
      help: 'Enrollment attempts, by result',
      labelNames: ['result'] as const,
      registers: [registry],
    }),
    heartbeats: new Counter({
      name: 'lunanexa_heartbeats_total',
      help: 'Heartbeats, by result',
      labelNames: ['result'] as const,
      registers: [registry],
    }),
    streamsAttached: new Gauge({
      name: 'lunanexa_agent_streams_attached',
      help: 'Agent streams attached to this instance',
      registers: [registry],
    }),
    desiredSent: new Counter({
      name: 'lunanexa_desired_states_sent_total',
      help: 'Signed desired states sent on agent streams',
      registers: [registry],
    }),
    machines: new Gauge({
      name: 'lunanexa_machines',
      help: 'Machines by liveness state, as of the last controller tick',
      labelNames: ['state'] as const,
      registers: [registry],
    }),
    nodeMetric: new Gauge({
      name: 'lunanexa_node_metric',
      help: 'Gauges reported by node agents in heartbeats (nodes have no scrape port)',
      labelNames: ['machine', 'name'] as const,
      registers: [registry],
    }),
    reconcileDuration: new Histogram({
      name: 'lunanexa_reconcile_duration_seconds',
      help: 'Duration of controller reconcile passes',
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [registry],
    }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
