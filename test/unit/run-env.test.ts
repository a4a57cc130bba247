import { describe, expect, it } from 'vitest';
import { DEFAULT_MASTER_PORT, workerEnvironments, workerName } from '../../functions/core/runs/env.js';

const addressOf = new Map([
  ['m1', '10.0.0.1'],
  ['m2', '10.0.0.2'],
]);

describe('worker names and environments', () => {
  it('names workers <run>-<rank>, or <run>-<group>-<rank> with groups', () => {
    expect(workerName('llama-ft', null, 0)).toBe('llama-ft-0');
    expect(workerName('llama-ft', 'ps', 17)).toBe('llama-ft-ps-17');
  });

  it('gives each worker its rank, local rank, world size, rank 0 address and its GPUs', () => {
    const workers = [
      { group: null, rank: 2, machineId: 'm2', gpuIndices: [4, 5] },
      { group: null, rank: 0, machineId: 'm1', gpuIndices: [0, 1] },
      { group: null, rank: 3, machineId: 'm2', gpuIndices: [6, 7] },
      { group: null, rank: 1, machineId: 'm1', gpuIndices: [2, 3] },
    ];
    const envs = workerEnvironments({ run: 'train', workers, addressOf });
    expect(envs.map((e) => [e.name, e.machineId, e.env])).toEqual([
      [
        'train-0',
        'm1',
        { RANK: '0', LOCAL_RANK: '0', WORLD_SIZE: '4', MASTER_ADDR: '10.0.0.1', MASTER_PORT: String(DEFAULT_MASTER_PORT), CUDA_VISIBLE_DEVICES: '0,1' },
      ],
      ['train-1', 'm1', { RANK: '1', LOCAL_RANK: '1', WORLD_SIZE: '4', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500', CUDA_VISIBLE_DEVICES: '2,3' }],
      ['train-2', 'm2', { RANK: '2', LOCAL_RANK: '0', WORLD_SIZE: '4', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500', CUDA_VISIBLE_DEVICES: '4,5' }],
      ['train-3', 'm2', { RANK: '3', LOCAL_RANK: '1', WORLD_SIZE: '4', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500', CUDA_VISIBLE_DEVICES: '6,7' }],
    ]);
  });

  it('numbers ranks across groups, takes the master port given, and hides every GPU from a worker without one', () => {
    const workers = [
      { group: 'trainer', rank: 0, machineId: 'm2', gpuIndices: [0] },
      { group: 'ps', rank: 1, machineId: 'm2', gpuIndices: [] },
    ];
    expect(workerEnvironments({ run: 'rl', workers, addressOf, masterPort: 23456 })).toEqual([
      {
        name: 'rl-trainer-0',
        machineId: 'm2',
        env: { RANK: '0', LOCAL_RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.2', MASTER_PORT: '23456', CUDA_VISIBLE_DEVICES: '0' },
      },
      {
        name: 'rl-ps-1',
        machineId: 'm2',
        env: { RANK: '1', LOCAL_RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.2', MASTER_PORT: '23456', CUDA_VISIBLE_DEVICES: '' },
      },
    ]);
  });

  it('refuses ranks with a gap or a rank 0 without an address: the caller placed them wrong', () => {
    const at = (rank: number, machineId = 'm1') => ({ group: null, rank, machineId, gpuIndices: [] });
    expect(() => workerEnvironments({ run: 'r', workers: [at(0), at(2)], addressOf })).toThrow('run r: ranks must be 0 to 1, found 2 at 1');
    expect(() => workerEnvironments({ run: 'r', workers: [at(0, 'm9')], addressOf })).toThrow("run r: rank 0's machine m9 has no address");
    expect(workerEnvironments({ run: 'r', workers: [], addressOf })).toEqual([]);
  });
});
