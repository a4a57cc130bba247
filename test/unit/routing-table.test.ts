import { describe, expect, it } from 'vitest';
import { RoutingTable, type DeploymentRoute } from '../../functions/relay/routing.js';

const route = (name: string): DeploymentRoute => ({
  id: `dep_${name}`,
  workspaceId: 'wsp_1',
  name,
  model: name,
  maxConcurrency: 1,
  queueCapacity: 1,
  createdAt: new Date(0),
  replicas: [],
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
      const snapshot = names.map(route);
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
