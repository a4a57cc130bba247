import { describe, expect, it } from 'vitest';
import { capacityOf, freeOn, placeReplica, resourceRefusal, type Resources } from '../../functions/core/scheduler/place.js';
import { hostsOf, reserveOn, workersFitting } from '../../functions/core/runs/hosts.js';
import { pickShape, type ShapeRequest } from '../../functions/core/runs/shape.js';
import { fleet, gpuInventory, machine } from '../helpers/run-fixtures.js';

const request = (workers: number, gpus = 1, extra: Partial<ShapeRequest> = {}, need: Partial<ShapeRequest['need']> = {}): ShapeRequest => ({
  workers,
  need: { gpus, cores: 0, memoryMiB: 0, gpuMemoryMiB: 0, ...need },
  selector: {},
  ...extra,
});
const used = (gpus: number, extra = {}) => ({ reserved: { gpus, memoryMiB: 0, assignments: 1, ...extra } });

describe('one accounting for replicas and workers', () => {
  it('counts cores besides GPUs and memory, none reserved where nothing said so', () => {
    const m = machine('m', { inventory: gpuInventory(8, 81_920, 32), ...used(2, { cores: 12 }) });
    expect(capacityOf(m.inventory)).toEqual({ gpus: 8, cores: 32, memoryMiB: 8 * 81_920, gpuMemoryEachMiB: 81_920 });
    expect(freeOn(m)).toEqual({ gpus: 6, cores: 20, memoryMiB: 8 * 81_920, gpuMemoryEachMiB: 81_920 });
    expect(freeOn(machine('r', used(1))).cores).toBe(64);
  });

  it('refuses a replica asking for more cores than are free, after GPUs and memory', () => {
    const m = machine('m', { inventory: gpuInventory(8, 81_920, 32), ...used(0, { cores: 30 }) });
    const replica = { deploymentId: 'd', model: 'chat', selector: {}, gpus: 1, memoryMiB: 0 };
    expect(placeReplica([m], { ...replica, cores: 4 }).rejected).toEqual([{ machineId: 'm', reason: 'needs 4 cores, 2 free' }]);
    expect(placeReplica([m], { ...replica, cores: 2 }).machineId).toBe('m');
    expect(placeReplica([m], replica).machineId).toBe('m');
    expect(placeReplica([m], { ...replica, gpus: 9, cores: 4 }).rejected).toEqual([{ machineId: 'm', reason: 'needs 9 GPUs, 8 free' }]);
  });

  it('fits as many workers as the scheduler would let reserve, on 2,000 random machines and needs', () => {
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 2_000; i++) {
      const room: Resources = { gpus: random(9), cores: random(65), memoryMiB: random(200_000), gpuMemoryEachMiB: 81_920 };
      const need = { gpus: random(3), cores: random(9), memoryMiB: random(3) * 16_384, gpuMemoryMiB: 0 };
      const n = workersFitting(room, need, 100);
      const times = (k: number) => ({ gpus: k * need.gpus, cores: k * need.cores, memoryMiB: k * need.memoryMiB });
      expect(resourceRefusal(room, times(n))).toBeNull();
      if (n < 100) expect(resourceRefusal(room, times(n + 1))).not.toBeNull();
    }
  });

  it('takes reservations down and gives them back', () => {
    const [host] = hostsOf([machine('m', used(2))]);
    const need = { gpus: 2, cores: 4, memoryMiB: 1024, gpuMemoryMiB: 0 };
    reserveOn(host!, need, 3);
    expect(host!.free).toEqual({ gpus: 0, cores: 52, memoryMiB: 8 * 81_920 - 3072, gpuMemoryEachMiB: 81_920 });
    reserveOn(host!, need, -3);
    expect(host!.free).toEqual(freeOn(machine('m', used(2))));
  });

  it('orders hosts by machine id and marks those that take nothing', () => {
    const hosts = hostsOf([machine('b', { cordoned: true }), machine('a', { liveness: 'stale' }), machine('c', { draining: true }), machine('d')]);
    expect(hosts.map((h) => [h.id, h.unavailable])).toEqual([
      ['a', 'machine is stale'],
      ['b', 'machine is cordoned'],
      ['c', 'machine is draining'],
      ['d', null],
    ]);
  });
});

describe('the shape of a run', () => {
  it('puts a GPU count on as few machines as can take it, the same number on each', () => {
    expect(pickShape(hostsOf(fleet(4)), request(16))).toEqual({ shape: { workersPerMachine: 8, machineIds: ['m00', 'm01'] } });
    expect(pickShape(hostsOf(fleet(4)), request(4, 2))).toEqual({ shape: { workersPerMachine: 4, machineIds: ['m00'] } });
    expect(pickShape(hostsOf(fleet(4)), request(3))).toEqual({ shape: { workersPerMachine: 3, machineIds: ['m00'] } });
    // 12 GPUs on 8-GPU machines: not 8 + 4, but 2 x 6.
    expect(pickShape(hostsOf(fleet(4)), request(12))).toEqual({ shape: { workersPerMachine: 6, machineIds: ['m00', 'm01'] } });
  });

  it('spreads wider when the fleet is busy, the tightest fits first', () => {
    const machines = [machine('m0', used(6)), machine('m1', used(4)), machine('m2', used(4)), machine('m3', used(5)), machine('m4', used(0))];
    // 8 workers: m4 alone takes them all.
    expect(pickShape(hostsOf(machines), request(8))).toEqual({ shape: { workersPerMachine: 8, machineIds: ['m4'] } });
    // 4 workers: m1 and m2 have exactly 4 free, m4 8; the exact fits go first, ties by id.
    expect(pickShape(hostsOf(machines), request(4))).toEqual({ shape: { workersPerMachine: 4, machineIds: ['m1'] } });
    // 12 workers: no 1 x 12, no 2 x 6 (only m4 has 6), 3 x 4 on m1, m2 and m4.
    expect(pickShape(hostsOf(machines), request(12))).toEqual({ shape: { workersPerMachine: 4, machineIds: ['m1', 'm2', 'm4'] } });
  });

  it('counts cores and memory per worker as well as GPUs', () => {
    const machines = [machine('m0', { inventory: gpuInventory(8, 81_920, 16) }), machine('m1', { inventory: gpuInventory(8, 81_920, 64) })];
    expect(pickShape(hostsOf(machines), request(4, 1, {}, { cores: 8 }))).toEqual({ shape: { workersPerMachine: 4, machineIds: ['m1'] } });
    expect(pickShape(hostsOf(machines), request(2, 1, {}, { cores: 8 }))).toEqual({ shape: { workersPerMachine: 2, machineIds: ['m0'] } });
    expect(pickShape(hostsOf(machines), request(4, 1, {}, { memoryMiB: 200_000 }))).toEqual({ shape: { workersPerMachine: 2, machineIds: ['m0', 'm1'] } });
  });

  it('places workers that reserve nothing on one machine, and CPU-only workers by cores', () => {
    expect(pickShape(hostsOf(fleet(3)), request(50, 0))).toEqual({ shape: { workersPerMachine: 50, machineIds: ['m00'] } });
    expect(pickShape(hostsOf(fleet(3)), request(6, 0, {}, { cores: 32 }))).toEqual({ shape: { workersPerMachine: 2, machineIds: ['m00', 'm01', 'm02'] } });
  });

  it('keeps to the selector, the policy rules, live machines and GPUs large enough', () => {
    const machines = [
      machine('a', { labels: { zone: 'a' } }),
      machine('b', { labels: { zone: 'b' }, liveness: 'down' }),
      machine('c', { labels: { zone: 'b' } }),
      machine('d', { labels: { zone: 'b', secure: 'yes' }, inventory: gpuInventory(8, 40_960) }),
      machine('e', { labels: { zone: 'b', secure: 'yes' } }),
    ];
    const constraints = [{ rule: 'data class pii', labels: { secure: 'yes' } }];
    expect(pickShape(hostsOf(machines), request(8, 1, { selector: { zone: 'b' } }))).toEqual({ shape: { workersPerMachine: 8, machineIds: ['c'] } });
    expect(pickShape(hostsOf(machines), request(8, 1, { selector: { zone: 'b' }, constraints }))).toEqual({
      shape: { workersPerMachine: 8, machineIds: ['d'] },
    });
    expect(pickShape(hostsOf(machines), request(8, 1, { selector: { zone: 'b' }, constraints }, { gpuMemoryMiB: 80_000 }))).toEqual({
      shape: { workersPerMachine: 8, machineIds: ['e'] },
    });
  });

  it('says why not: each shape with how many machines could take it, and the machines ruled out by reason', () => {
    const machines = [
      machine('m0', used(6)),
      machine('m1', used(4)),
      machine('m2', used(4)),
      machine('m3', { liveness: 'stale' }),
      machine('m4', { labels: { zone: 'a' } }),
      machine('m5', { labels: { zone: 'a' }, inventory: gpuInventory(8, 40_960) }),
    ];
    expect(pickShape(hostsOf(machines), request(16, 1, { selector: { zone: 'a' } }, { gpuMemoryMiB: 80_000 }))).toEqual({
      reason:
        '16 workers of 1 GPU, GPUs of 80000 MiB each do not fit now: as 2 machines x 8 (1 can), 4 machines x 4 (1 can), ' +
        '8 machines x 2 (1 can), 16 machines x 1 (1 can); ruled out 5 of 6 machines: 3 label zone=a not present, ' +
        '1 machine is stale, 1 needs GPUs of 80000 MiB, its GPUs have 40960 MiB',
    });
    expect(pickShape(hostsOf(machines.slice(0, 3)), request(12, 2, {}, { cores: 4 }))).toEqual({
      reason: '12 workers of 2 GPUs, 4 cores each do not fit now: as 6 machines x 2 (2 can), 12 machines x 1 (3 can)',
    });
    expect(pickShape(hostsOf([machine('m', used(8))]), request(2))).toEqual({ reason: '2 workers of 1 GPU each do not fit now: no machine has room for one' });
    expect(pickShape(hostsOf([machine('m', { cordoned: true })]), request(1))).toEqual({
      reason: '1 worker of 1 GPU each does not fit now: no machine has room for one; ruled out 1 of 1 machines: 1 machine is cordoned',
    });
  });

  it('judges against emptied machines when asked, preferring those with most of it free now', () => {
    const machines = [machine('m0', used(8)), machine('m1', used(3)), machine('m2', used(5)), machine('m3', used(1)), machine('m4', { liveness: 'stale' })];
    expect(pickShape(hostsOf(machines), request(16))).toEqual({ reason: expect.stringContaining('do not fit now') });
    expect(pickShape(hostsOf(machines), request(16), 'emptied')).toEqual({ shape: { workersPerMachine: 8, machineIds: ['m3', 'm1'] } });
    expect(pickShape(hostsOf(machines), request(40), 'emptied')).toEqual({
      reason: expect.stringMatching(/^40 workers of 1 GPU each would not fit even on emptied machines: as 5 machines x 8 \(4 can\)/),
    });
  });

  it('never picks a machine held for an aged run', () => {
    const hosts = hostsOf(fleet(2));
    hosts[0]!.heldFor = 'run_big';
    expect(pickShape(hosts, request(8))).toEqual({ shape: { workersPerMachine: 8, machineIds: ['m01'] } });
    expect(pickShape(hosts, request(16))).toEqual({
      reason:
        '16 workers of 1 GPU each do not fit now: as 2 machines x 8 (1 can), 4 machines x 4 (1 can), 8 machines x 2 (1 can), 16 machines x 1 (1 can); ruled out 1 of 2 machines: 1 held for aged run run_big',
    });
  });

  it('is deterministic whatever the order the machines come in', () => {
    const machines = Array.from({ length: 40 }, (_, i) => machine(`m${String(i).padStart(2, '0')}`, used((i * 7) % 9)));
    const shuffled = [...machines].sort((a, b) => ((a.id.charCodeAt(2) * 31) % 17) - ((b.id.charCodeAt(2) * 31) % 17) || (a.id < b.id ? 1 : -1));
    for (const workers of [1, 3, 8, 12, 24, 40, 64]) {
      expect(pickShape(hostsOf(shuffled), request(workers))).toEqual(pickShape(hostsOf(machines), request(workers)));
    }
  });
});
