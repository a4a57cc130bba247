import { inArray, isNull } from 'drizzle-orm';
import { deployments, workspaces } from '../store/schema/index.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { policyAllows, policyRules } from '../core/scheduler/policy.js';
import { runtimeName } from '../core/scheduler/policy.js';
import { loadFleetSnapshot } from '../services/fleet-load.js';
import type { Db } from '../store/db.js';
import type { ControlPlaneConfig } from '../kernel/config.js';

export interface RoutableReplica {
  assignmentId: string;
  machineId: string;
  machineName: string;
  /** The runtime reported itself warm (served recently): routing's tie-break prefers it. */
  warm: boolean;
  /** The deployment's stable replica set, or its canary's. */
  track: Track;
  /** The registry version it serves (`mv_...`); null for a deployment that names none. */
  versionId: string | null;
}

export type Track = 'stable' | 'canary';

export interface DeploymentRoute {
  id: string;
  workspaceId: string;
  name: string;
  model: string;
  maxConcurrency: number;
  queueCapacity: number;
  createdAt: Date;
  /** The registry alias it follows: requests may name the alias instead of the deployment. */
  alias: string | null;
  /** Percent of requests the canary replicas take while both sets serve; 0 without a canary. */
  canaryWeight: number;
  dataClass: string | null;
  /** Scaled to zero: the first request wakes it (functions/dataplane/wake.ts). */
  asleep: boolean;
  /**
   * Desired replicas on their way to serving (preparing, pulling, starting, or ready and not routable yet): with none routable but some
   * starting, requests wait for one to be ready; a deployment that cannot be placed or only fails does not hold them.
   */
  startingReplicas: number;
  replicas: RoutableReplica[];
  /** Of `startingReplicas`, those of the canary set. */
  startingCanary: number;
}

/** On their way to serving: loading, or ready but not routable yet (its report has not caught up with its assignment). */
const STARTING: ReadonlySet<string> = new Set(['preparing', 'pulling', 'starting', 'ready']);

/** Reads every deployment with its strictly routable replicas (docs/design.md section 4, "Strict routing"). */
export async function loadRoutes(db: Db, config: ControlPlaneConfig): Promise<DeploymentRoute[]> {
  const rows = await db.select().from(deployments).where(isNull(deployments.deletedAt));
  const { machines } = await loadFleetSnapshot(db, config);
  // Data classes are enforced here as well as at placement: a policy tightened since stops traffic at once.
  const classed = rows.filter((d) => d.dataClass !== null);
  const policies = new Map<string, WorkspacePolicy>();
  if (classed.length > 0) {
    const found = await db
      .select({ id: workspaces.id, policy: workspaces.policy })
      .from(workspaces)
      .where(inArray(workspaces.id, [...new Set(classed.map((d) => d.workspaceId))]));
    for (const w of found) policies.set(w.id, WorkspacePolicy.parse(w.policy));
  }
  const rulesOf = new Map(
    classed.map((d) => [
      d.id,
      policyRules(policies.get(d.workspaceId) ?? WorkspacePolicy.parse({}), { dataClass: d.dataClass, runtime: runtimeName(d.runtime), licence: null }),
    ]),
  );
  const replicas = new Map<string, RoutableReplica[]>();
  const starting = new Map<string, number>();
  const startingCanary = new Map<string, number>();
  const count = (counts: Map<string, number>, id: string) => counts.set(id, (counts.get(id) ?? 0) + 1);
  for (const machine of machines) {
    for (const runtime of machine.runtimes) {
      const rules = rulesOf.get(runtime.deploymentId);
      if (rules && !policyAllows(rules, machine.labels)) continue;
      if (runtime.desired && !runtime.routable && STARTING.has(runtime.state)) {
        count(starting, runtime.deploymentId);
        if (runtime.track === 'canary') count(startingCanary, runtime.deploymentId);
      }
      if (!runtime.routable) continue;
      const list = replicas.get(runtime.deploymentId) ?? [];
      list.push({
        assignmentId: runtime.assignmentId,
        machineId: machine.id,
        machineName: machine.name,
        warm: runtime.warm,
        track: runtime.track,
        versionId: runtime.versionId,
      });
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
    alias: d.source?.kind === 'alias' ? d.source.alias : null,
    canaryWeight: d.canary?.weight ?? 0,
    dataClass: d.dataClass,
    asleep: d.asleepSince !== null,
    startingReplicas: starting.get(d.id) ?? 0,
    startingCanary: startingCanary.get(d.id) ?? 0,
    replicas: replicas.get(d.id) ?? [],
  }));
}

/**
 * The routing snapshot of one instance, refreshed in the background so that the hot path of an inference
 * request reads memory, not the database. A replica that stops being routable leaves within one refresh;
 * changes this instance sees itself (`invalidate`) are picked up at once. Requests waiting for a replica
 * (`waitForReplica`) are woken by each refresh.
 */
export class RoutingTable {
  private routes = new Map<string, DeploymentRoute>();
  private aliases = new Map<string, DeploymentRoute>();
  /** Requests routed per deployment by this instance: the canary's share counts them (`canaryTurn`). */
  private readonly turns = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | null = null;
  /** A change was signalled while a refresh was in flight (it may have read the state before the change). */
  private stale = false;
  private refreshedAt = -Infinity;
  /** One check per waiting request, run after each refresh. */
  private readonly waiters = new Set<() => void>();
  /** Refreshes for waiting requests where no background refresh runs. */
  private poll: NodeJS.Timeout | undefined;

  constructor(
    private readonly load: () => Promise<DeploymentRoute[]>,
    private readonly refreshMsOf: () => number,
    private readonly onError: (error: unknown) => void = () => {},
    /**
     * Each refresh must belong to a request (Workers: I/O lives only within the request that started it, on
     * connections that close with it), so a change marks the snapshot stale and the next request that routes
     * reloads it (`fresh`), instead of a refresh started here outliving its request.
     */
    private readonly requestScoped = false,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.refreshMsOf());
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    clearInterval(this.poll);
    this.poll = undefined;
  }

  refresh(): Promise<void> {
    this.refreshing ??= this.load()
      .then((routes) => {
        this.routes = new Map(routes.map((r) => [`${r.workspaceId}/${r.name}`, r]));
        const followers = routes.filter((r) => r.alias !== null).sort((a, b) => (a.name < b.name ? 1 : -1));
        this.aliases = new Map(followers.map((r) => [`${r.workspaceId}/${r.alias}`, r]));
        this.refreshedAt = performance.now();
        for (const check of this.waiters) check();
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
    if (this.requestScoped) {
      this.refreshedAt = -Infinity;
      return;
    }
    this.stale = this.refreshing !== null;
    if (!this.stale) void this.refresh();
  }

  /**
   * Resolves once a refresh that started after this call has finished: what a writer awaits so that its own
   * change (a deployment applied or deleted) is routed before it answers. A refresh already in flight may have
   * read the state before the change, so it waits for the next one.
   */
  async refreshed(): Promise<void> {
    if (this.refreshing) await this.refreshing;
    await this.refresh();
  }

  /**
   * Refreshes first when the snapshot is older than two periods: where no background refresh runs (Workers,
   * whose I/O lives only within a request), or after the process slept.
   */
  async fresh(): Promise<void> {
    if (performance.now() - this.refreshedAt > 2 * this.refreshMsOf()) await this.refresh();
  }

  /**
   * The deployment a request's `model` names: a deployment's own name first, else a registry alias some deployment
   * follows (the first of them by name, so the choice is stable).
   */
  resolve(workspaceId: string, model: string): DeploymentRoute | undefined {
    return this.routes.get(`${workspaceId}/${model}`) ?? this.aliases.get(`${workspaceId}/${model}`);
  }

  /** The count of requests this instance routed to the deployment before this one. */
  turn(deploymentId: string): number {
    const n = this.turns.get(deploymentId) ?? 0;
    this.turns.set(deploymentId, n + 1);
    return n;
  }

  /** The aliases some deployment of the workspace follows, each with the deployment a request naming it reaches. */
  aliasRoutes(workspaceId: string): Array<{ alias: string; route: DeploymentRoute }> {
    return [...this.aliases.values()]
      .filter((r) => r.workspaceId === workspaceId)
      .map((route) => ({ alias: route.alias!, route }))
      .sort((a, b) => (a.alias < b.alias ? -1 : 1));
  }

  list(workspaceId: string): DeploymentRoute[] {
    return [...this.routes.values()].filter((r) => r.workspaceId === workspaceId).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /**
   * Waits while the route of `workspaceId/model` has no replica `usable` accepts but asks for some (they are
   * starting, or rolling): resolves with the route once a refresh finds one usable, finds the deployment asking
   * for none, or finds it gone (undefined). Rejects with the signal's reason when `signal` aborts.
   */
  waitForReplica(
    workspaceId: string,
    model: string,
    opts: { signal: AbortSignal; usable?: (replica: RoutableReplica) => boolean },
  ): Promise<DeploymentRoute | undefined> {
    const { signal, usable = () => true } = opts;
    const settled = (): { route: DeploymentRoute | undefined } | null => {
      const route = this.resolve(workspaceId, model);
      return !route || route.startingReplicas === 0 || route.replicas.some(usable) ? { route } : null;
    };
    if (signal.aborted) return Promise.reject(signal.reason);
    const now = settled();
    if (now) return Promise.resolve(now.route);
    return new Promise((resolve, reject) => {
      const check = () => {
        const done = settled();
        if (!done) return;
        cleanup();
        resolve(done.route);
      };
      const onAbort = () => {
        cleanup();
        reject(signal.reason);
      };
      const cleanup = () => {
        this.waiters.delete(check);
        signal.removeEventListener('abort', onAbort);
        if (this.waiters.size === 0) {
          clearInterval(this.poll);
          this.poll = undefined;
        }
      };
      this.waiters.add(check);
      signal.addEventListener('abort', onAbort, { once: true });
      // Where no background refresh runs (Workers), nothing else would wake the waiting request.
      if (!this.timer && !this.poll) this.poll = setInterval(() => void this.refresh(), this.refreshMsOf());
    });
  }
}
