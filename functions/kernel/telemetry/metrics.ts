import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { NodeMetrics } from './node-metrics.js';
import { WORKSPACE_LABEL, workspaceExposition } from './workspace-metrics.js';

/** The control plane's metrics; one registry per app so several instances can share a process in tests. */
export function createMetrics(opts: { processMetrics?: boolean } = {}) {
  const registry = new Registry();
  if (opts.processMetrics) collectDefaultMetrics({ register: registry, prefix: 'lunanexa_' });
  const nodeMetric = new Gauge({
    name: 'lunanexa_node_metric',
    help: 'Gauges reported by node agents in heartbeats (nodes have no scrape port); allow-listed names only',
    labelNames: [WORKSPACE_LABEL, 'machine', 'name'] as const,
    registers: [registry],
  });
  const nodeMetricsRefused = new Counter({
    name: 'lunanexa_node_metrics_refused_total',
    help: 'Heartbeat metrics dropped because their name is not one the agent reports',
    registers: [registry],
  });
  const nodeGpu = new Gauge({
    name: 'lunanexa_node_gpu',
    help: 'Each GPU of a node as its agent sampled it (docs/telemetry.md): utilization_percent, memory_used_mib, memory_total_mib, temperature_c, power_w',
    labelNames: [WORKSPACE_LABEL, 'machine', 'gpu', 'name'] as const,
    registers: [registry],
  });
  const runtimeEngine = new Gauge({
    name: 'lunanexa_runtime_engine',
    help: "Each runtime's engine as its agent read its metrics: requests_running, requests_waiting, kv_cache_usage, prompt_tokens_total, generation_tokens_total",
    labelNames: [WORKSPACE_LABEL, 'machine', 'assignment', 'name'] as const,
    registers: [registry],
  });
  const inference = inferenceMetrics(registry);
  return {
    registry,
    /** The Prometheus text of one workspace's series (`/metrics` for a token of that workspace). */
    workspaceSeries: (workspaceId: string) => workspaceExposition([nodeMetric, nodeGpu, runtimeEngine, ...Object.values(inference)], workspaceId),
    nodeMetric,
    /** The bounded writer of `nodeMetric` and the telemetry gauges: heartbeats go through it, never to a gauge directly. */
    nodeMetrics: new NodeMetrics(nodeMetric, nodeMetricsRefused, { gpu: nodeGpu, engine: runtimeEngine }),
    agentAuthFailures: new Counter({
      name: 'lunanexa_agent_auth_failures_total',
      help: 'Agent requests rejected by machine authentication, by reason',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    workerReportsIgnored: new Counter({
      name: 'lunanexa_worker_reports_ignored_total',
      help: 'Run worker reports in heartbeats that were ignored: a worker not placed on the reporting machine, of another attempt, or a move no path allows',
      registers: [registry],
    }),
    agentUploads: new Counter({
      name: 'lunanexa_agent_uploads_total',
      help: 'Agent uploads of invocation frames opened on this instance, by kind (uplink, invocation: the per-invocation fallback) and route (local: the stream is held here; piped: forwarded to the link holder)',
      labelNames: ['kind', 'route'] as const,
      registers: [registry],
    }),
    consoleSignInFailures: new Counter({
      name: 'lunanexa_console_sign_in_failures_total',
      help: 'Console sign-ins refused, by reason (unknown: no such token, so no workspace to audit it in; revoked, expired, inference: audited as console.sign-in-failed too)',
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
    writeBehindDropped: new Counter({
      name: 'lunanexa_write_behind_dropped_total',
      help: 'Rows a group commit could not write (a bad row, isolated from its batch; or a whole batch when the store failed)',
      labelNames: ['what'] as const,
      registers: [registry],
    }),
    busReconnects: new Counter({
      name: 'lunanexa_bus_reconnects_total',
      help: 'Times the relay bus listened again after losing its LISTEN connection (database restart, network error)',
      registers: [registry],
    }),
    orphanedWorkloads: new Counter({
      name: 'lunanexa_orphaned_workloads_total',
      help: 'Workloads marked failed (holder_lost) because the instance that held them died',
      registers: [registry],
    }),
    backgroundErrors: new Counter({
      name: 'lunanexa_background_errors_total',
      help: 'Failures of background tasks (timers, loops, listeners), caught and logged instead of taking the process down',
      labelNames: ['task'] as const,
      registers: [registry],
    }),
    consoleRenders: new Counter({
      name: 'lunanexa_console_renders_total',
      help: 'Renders of a live console section (one per view, workspace and role per round, shared by every stream that shows it), by view',
      labelNames: ['view'] as const,
      registers: [registry],
    }),
    ...inference,
    reconcileDuration: new Histogram({
      name: 'lunanexa_reconcile_duration_seconds',
      help: 'Duration of controller reconcile passes',
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [registry],
    }),
  };
}
export type Metrics = ReturnType<typeof createMetrics>;

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const LABELS = [WORKSPACE_LABEL, 'model', 'deployment', 'node'] as const;

/** Inference metrics (docs/design.md section 5), by workspace: p50/p95/p99 derive from the histograms. */
function inferenceMetrics(registry: Registry) {
  const histogram = (name: string, help: string, buckets = LATENCY_BUCKETS) =>
    new Histogram({ name, help, labelNames: LABELS, buckets, registers: [registry] });
  const counter = (name: string, help: string, labelNames: readonly string[] = LABELS) => new Counter({ name, help, labelNames, registers: [registry] });
  return {
    ttft: histogram('lunanexa_time_to_first_token_seconds', 'Time from dispatch to the first generated bytes'),
    interTokenLatency: histogram('lunanexa_inter_token_latency_seconds', 'Mean time between tokens of a request'),
    tokensPerSecond: histogram('lunanexa_tokens_per_second', 'Generation rate of a request', [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 50000]),
    requestDuration: histogram('lunanexa_request_duration_seconds', 'End-to-end latency of inference requests'),
    queueTime: histogram('lunanexa_queue_seconds', 'Time an invocation waited for a runtime slot'),
    accelTime: histogram('lunanexa_accelerator_seconds', 'Time an invocation spent on the runtime'),
    admissionRejected: counter('lunanexa_admission_rejected_total', 'Requests refused by admission (429)', [WORKSPACE_LABEL, 'model', 'deployment']),
    cancellations: counter('lunanexa_cancellations_total', 'Invocations cancelled (client disconnect or API)'),
    retries: counter('lunanexa_retries_total', 'Invocations retried on another replica before the first byte'),
    runtimeFailures: counter('lunanexa_runtime_failures_total', 'Invocations that failed on the node or runtime'),
    slowClientsCut: counter(
      'lunanexa_slow_clients_cut_total',
      'Streamed answers cut because the client read slower than the runtime wrote, past the relay bound',
    ),
  };
}
