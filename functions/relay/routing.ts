import { isNull } from 'drizzle-orm';
import { deployments } from '../store/schema/index.js';
import { listMachines } from '../services/machines.js';
import type { ServiceCtx } from '../services/service-context.js';

export interface RoutableReplica {
  assignmentId: string;
  machineId: string;
  machineName: string;
}

export interface DeploymentRoute {
  id: string;
  workspaceId: string;
  name: string;
  model: string;
  maxConcurrency: number;
  queueCapacity: number;
  createdAt: Date;
  replicas: RoutableReplica[];
}

/** Reads every deployment with its strictly routable replicas (DESIGN.md section 4, "Strict routing"). */
export async function loadRoutes(ctx: ServiceCtx): Promise<DeploymentRoute[]> {
  const [rows, machines] = await Promise.all([ctx.db.select().from(deployments).where(isNull(deployments.deletedAt)), listMachines({ ctx, input: {} })]);
  const replicas = new Map<string, RoutableReplica[]>();
  for (const machine of machines) {
    for (const runtime of machine.runtimes) {
      if (!runtime.routable) continue;
      const list = replicas.get(runtime.deploymentId) ?? [];
      list.push({ assignmentId: runtime.assignmentId, machineId: machine.id, machineName: machine.name });
      replicas.set(runtime.deploymentId, list);
    }
  }
  return rows.map((d) => ({
    id: d.id,
    workspaceId: d.workspaceId,
    name: d.name,
    model: d.model,
    maxConcurrency: d.maxConcurrency,
    queueCapacity: d.queueCapacity,
    createdAt: d.createdAt,
    replicas: replicas.get(d.id) ?? [],
  }));
}

/**
 * The routing snapshot of one instance, refreshed in the background so that the hot path of an inference
 * request reads memory, not the database. A replica that stops being routable leaves within one refresh;
 * changes this instance sees itself (`invalidate`) are picked up at once.
 */
export class RoutingTable {
  private routes = new Map<string, DeploymentRoute>();
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | null = null;
  /** A change was signalled while a refresh was in flight (it may have read the state before the change). */
  private stale = false;
  private refreshedAt = -Infinity;

  constructor(
    private readonly load: () => Promise<DeploymentRoute[]>,
    private readonly refreshMsOf: () => number,
    private readonly onError: (error: unknown) => void = () => {},
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.refreshMsOf());
  }

  stop(): void {
    clearInterval(this.timer);
  }

  refresh(): Promise<void> {
    this.refreshing ??= this.load()
      .then((routes) => {
        this.routes = new Map(routes.map((r) => [`${r.workspaceId}/${r.name}`, r]));
        this.refreshedAt = performance.now();
      })
      .catch(this.onError)
      .finally(() => {
        this.refreshing = null;
        if (this.stale) this.invalidate();
      });
    return this.refreshing;
  }

  /**
   * Something routing depends on changed on this instance (a node stream came or went, a node reported its
   * runtimes, a deployment was applied): refresh now rather than at the next period.
   */
  invalidate(): void {
    this.stale = this.refreshing !== null;
    if (!this.stale) void this.refresh();
  }

  /**
   * Refreshes first when the snapshot is older than two periods: where no background refresh runs (Workers,
   * whose I/O lives only within a request), or after the process slept.
   */
  async fresh(): Promise<void> {
    if (performance.now() - this.refreshedAt > 2 * this.refreshMsOf()) await this.refresh();
  }

  resolve(workspaceId: string, model: string): DeploymentRoute | undefined {
    return this.routes.get(`${workspaceId}/${model}`);
  }

  list(workspaceId: string): DeploymentRoute[] {
    return [...this.routes.values()].filter((r) => r.workspaceId === workspaceId).sort((a, b) => (a.name < b.name ? -1 : 1));
  }
}
