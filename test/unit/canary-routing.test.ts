import { describe, expect, it } from 'vitest';
import { canaryTurn } from '../../functions/core/scheduler/route.js';
import { onTrack } from '../../functions/dataplane/tracks.js';
import { RoutingTable, type DeploymentRoute, type RoutableReplica, type Track } from '../../functions/dataplane/routing.js';

const replica = (id: string, track: Track): RoutableReplica => ({
  assignmentId: id,
  machineId: `mch_${id}`,
  machineName: id,
  warm: true,
  track,
  versionId: `mv_${track}`,
});

const route = (over: Partial<DeploymentRoute> = {}): DeploymentRoute => ({
  id: 'dep_chat',
  workspaceId: 'wsp_1',
  name: 'chat',
  model: 'chat',
  maxConcurrency: 4,
  queueCapacity: 64,
  createdAt: new Date(0),
  alias: null,
  canaryWeight: 10,
  dataClass: null,
  asleep: false,
  startingReplicas: 0,
  startingCanary: 0,
  replicas: [replica('a', 'stable'), replica('b', 'stable'), replica('c', 'canary')],
  ...over,
});

describe('canaryTurn', () => {
  it.each([0, 1, 5, 10, 33, 50, 99, 100])('sends exactly %i of every 100 consecutive requests to the canary', (weight) => {
    for (const start of [0, 100, 737]) {
      let canary = 0;
      for (let n = start; n < start + 100; n++) if (canaryTurn(n, weight)) canary += 1;
      expect(canary).toBe(weight);
    }
  });

  it('spreads them evenly: at 10 % never two canary requests within ten', () => {
    const turns = Array.from({ length: 200 }, (_, n) => canaryTurn(n, 10));
    const at = turns.flatMap((t, n) => (t ? [n] : []));
    expect(at.slice(0, 3)).toEqual([9, 19, 29]);
    for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!).toBe(10);
  });
});

describe('onTrack', () => {
  it('keeps the chosen set when it serves', () => {
    expect(onTrack(route(), 'canary', false).replicas.map((r) => r.assignmentId)).toEqual(['c']);
    expect(onTrack(route(), 'stable', false).replicas.map((r) => r.assignmentId)).toEqual(['a', 'b']);
  });

  it('falls back to every replica when the chosen set has none serving, unless pinned', () => {
    const noCanary = route({ replicas: [replica('a', 'stable')], startingReplicas: 1, startingCanary: 1 });
    expect(onTrack(noCanary, 'canary', false).replicas.map((r) => r.assignmentId)).toEqual(['a']);
    const pinned = onTrack(noCanary, 'canary', true);
    expect(pinned.replicas).toEqual([]);
    // Pinned, it waits for its own set only: the canary starting.
    expect(pinned.startingReplicas).toBe(1);
    expect(onTrack(noCanary, 'stable', true).startingReplicas).toBe(0);
  });
});

describe('RoutingTable.resolve', () => {
  it('finds a deployment by its own name first, then by the alias it follows, the first follower by name', async () => {
    const routes = [
      route({ id: 'dep_b', name: 'b-chat', alias: 'chat-default' }),
      route({ id: 'dep_a', name: 'a-chat', alias: 'chat-default' }),
      route({ id: 'dep_x', name: 'chat-default' }),
    ];
    const table = new RoutingTable(
      async () => routes,
      () => 60_000,
    );
    await table.refresh();
    expect(table.resolve('wsp_1', 'chat-default')?.id).toBe('dep_x');
    expect(table.resolve('wsp_1', 'a-chat')?.id).toBe('dep_a');
    const withoutOwner = new RoutingTable(
      async () => routes.slice(0, 2),
      () => 60_000,
    );
    await withoutOwner.refresh();
    expect(withoutOwner.resolve('wsp_1', 'chat-default')?.id).toBe('dep_a');
    expect(withoutOwner.resolve('wsp_2', 'chat-default')).toBeUndefined();
    expect(withoutOwner.aliasRoutes('wsp_1').map((a) => [a.alias, a.route.name])).toEqual([['chat-default', 'a-chat']]);
  });
});
