import { afterEach, describe, expect, it, vi } from 'vitest';
import { RoutingTable, type DeploymentRoute, type RoutableReplica } from '../../functions/dataplane/routing.js';

const route = (name: string, over: Partial<DeploymentRoute> = {}): DeploymentRoute => ({
  id: `dep_${name}`,
  workspaceId: 'wsp_1',
  name,
  model: name,
  maxConcurrency: 1,
  queueCapacity: 1,
  createdAt: new Date(0),
  alias: null,
  canaryWeight: 0,
  dataClass: null,
  asleep: false,
  startingReplicas: 1,
  startingCanary: 0,
  replicas: [],
  ...over,
});

const replica = (assignmentId: string): RoutableReplica => ({
  assignmentId,
  machineId: `mch_${assignmentId}`,
  machineName: `node-${assignmentId}`,
  warm: false,
  track: 'stable',
  versionId: null,
});

/** A loader whose loads finish when the test says, each reading the "store" as it is when the load starts. */
function store() {
  let names: string[] = [];
  const pending: Array<() => void> = [];
  let loads = 0;
  return {
    set: (next: string[]) => (names = next),
    load: () => {
      loads += 1;
      const snapshot = names.map((name) => route(name));
      return new Promise<DeploymentRoute[]>((resolve) => pending.push(() => resolve(snapshot)));
    },
    finishAll: async () => {
      while (pending.length) {
        pending.shift()!();
        await new Promise((r) => setTimeout(r, 0));
      }
    },
    loads: () => loads,
  };
}

describe('RoutingTable.invalidate', () => {
  it('refreshes at once', async () => {
    const s = store();
    const table = new RoutingTable(s.load, () => 60_000);
    s.set(['a']);
    table.invalidate();
    await s.finishAll();
    expect(table.resolve('wsp_1', 'a')?.name).toBe('a');
    expect(s.loads()).toBe(1);
  });

  it('refreshes once more after a refresh that was already reading when the change came', async () => {
    const s = store();
    const table = new RoutingTable(s.load, () => 60_000);
    s.set(['a']);
    void table.refresh();
    // The change lands while the first load has already read the old state.
    s.set(['a', 'b']);
    table.invalidate();
    table.invalidate();
    await s.finishAll();
    expect(table.resolve('wsp_1', 'b')?.name).toBe('b');
    expect(s.loads()).toBe(2);
  });
});

describe('RoutingTable.invalidate, request-scoped (Workers)', () => {
  it('starts no load of its own: the next request that routes reloads (fresh)', async () => {
    const s = store();
    const table = new RoutingTable(
      s.load,
      () => 60_000,
      () => {},
      true,
    );
    s.set(['a']);
    const first = table.fresh();
    await s.finishAll();
    await first;
    expect(s.loads()).toBe(1);
    s.set(['a', 'b']);
    table.invalidate();
    expect(s.loads()).toBe(1);
    const second = table.fresh();
    await s.finishAll();
    await second;
    expect(s.loads()).toBe(2);
    expect(table.resolve('wsp_1', 'b')?.name).toBe('b');
  });
});

/** A loader that answers at once with what the test last set (or fails, when it is an Error). */
function fleet(initial: DeploymentRoute[] = []) {
  let routes: DeploymentRoute[] | Error = initial;
  let loads = 0;
  return {
    set: (next: DeploymentRoute[] | Error) => (routes = next),
    load: async () => {
      loads += 1;
      if (routes instanceof Error) throw routes;
      return routes;
    },
    loads: () => loads,
  };
}

/** The table's private count of waiting requests: none may be left behind by a wait that ended. */
const waiting = (table: RoutingTable) => (table as unknown as { waiters: Set<unknown> }).waiters.size;

/** Whether `promise` has settled, once pending promise callbacks ran (no timer: some tests fake them). */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < 10; i += 1) await Promise.resolve();
  return done;
}

describe('RoutingTable.waitForReplica', () => {
  const never = () => new AbortController().signal;

  afterEach(() => {
    vi.useRealTimers();
  });

  it('answers at once when the route already has a replica, is unknown, or asks for none', async () => {
    const f = fleet([route('up', { replicas: [replica('a')] }), route('zero', { startingReplicas: 0 })]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    expect((await table.waitForReplica('wsp_1', 'up', { signal: never() }))?.replicas).toHaveLength(1);
    expect(await table.waitForReplica('wsp_1', 'nope', { signal: never() })).toBeUndefined();
    expect((await table.waitForReplica('wsp_1', 'zero', { signal: never() }))?.startingReplicas).toBe(0);
    expect(waiting(table)).toBe(0);
  });

  it('keeps waiting through refreshes that find no replica, and resolves on the one that brings one', async () => {
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never() });
    await table.refresh();
    await table.refresh();
    expect(await settled(wait)).toBe(false);
    f.set([route('chat', { replicas: [replica('a')] })]);
    table.invalidate();
    expect((await wait)?.replicas.map((r) => r.assignmentId)).toEqual(['a']);
    expect(waiting(table)).toBe(0);
  });

  it('wakes every waiter of the route with one refresh', async () => {
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    const waits = [0, 1, 2].map(() => table.waitForReplica('wsp_1', 'chat', { signal: never() }));
    f.set([route('chat', { replicas: [replica('a')] })]);
    await table.refresh();
    expect((await Promise.all(waits)).map((r) => r?.replicas.length)).toEqual([1, 1, 1]);
  });

  it('counts only the replicas `usable` accepts (the ones a request has not tried yet)', async () => {
    const f = fleet([route('chat', { replicas: [replica('old')] })]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never(), usable: (r) => r.assignmentId !== 'old' });
    await table.refresh();
    expect(await settled(wait)).toBe(false);
    f.set([route('chat', { replicas: [replica('old'), replica('new')] })]);
    await table.refresh();
    expect((await wait)?.replicas.map((r) => r.assignmentId)).toEqual(['old', 'new']);
  });

  it('resolves undefined once the deployment is gone (deleted while requests waited)', async () => {
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never() });
    f.set([]);
    await table.refresh();
    expect(await wait).toBeUndefined();
  });

  it('resolves with the route once it asks for no replica (scaled to zero while requests waited)', async () => {
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never() });
    f.set([route('chat', { startingReplicas: 0 })]);
    await table.refresh();
    expect(await wait).toMatchObject({ name: 'chat', startingReplicas: 0, replicas: [] });
  });

  it('keeps waiting through a refresh that fails', async () => {
    const f = fleet([route('chat')]);
    const errors: unknown[] = [];
    const table = new RoutingTable(
      f.load,
      () => 60_000,
      (error) => errors.push(error),
    );
    await table.refresh();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never() });
    f.set(new Error('store down'));
    await table.refresh();
    expect(errors).toHaveLength(1);
    expect(await settled(wait)).toBe(false);
    f.set([route('chat', { replicas: [replica('a')] })]);
    await table.refresh();
    expect((await wait)?.replicas).toHaveLength(1);
  });

  it("rejects with the signal's reason when it aborts, and forgets the waiter", async () => {
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 60_000);
    await table.refresh();
    const controller = new AbortController();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: controller.signal });
    expect(waiting(table)).toBe(1);
    controller.abort('client disconnected');
    await expect(wait).rejects.toBe('client disconnected');
    expect(waiting(table)).toBe(0);
    // Already aborted: rejects without waiting, even where a replica is there.
    f.set([route('chat', { replicas: [replica('a')] })]);
    await table.refresh();
    await expect(table.waitForReplica('wsp_1', 'chat', { signal: controller.signal })).rejects.toBe('client disconnected');
  });

  it('refreshes by itself while requests wait where no background refresh runs (Workers), and stops after', async () => {
    vi.useFakeTimers();
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 1_000);
    await table.refresh();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never() });
    await vi.advanceTimersByTimeAsync(3_000);
    expect(f.loads()).toBe(4);
    f.set([route('chat', { replicas: [replica('a')] })]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect((await wait)?.replicas).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(f.loads()).toBe(5);
  });

  it('adds no refreshes of its own where the background refresh runs', async () => {
    vi.useFakeTimers();
    const f = fleet([route('chat')]);
    const table = new RoutingTable(f.load, () => 1_000);
    await table.start();
    const wait = table.waitForReplica('wsp_1', 'chat', { signal: never() });
    await vi.advanceTimersByTimeAsync(3_000);
    expect(f.loads()).toBe(4);
    expect(await settled(wait)).toBe(false);
    table.stop();
  });
});
