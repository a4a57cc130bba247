import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { NVIDIA_SMI_ARGS, NVIDIA_SMI_QUERY_FIELDS, parseNvidiaSmiCsv } from '../../agent/inventory/index.js';
import { GpuDevice } from '../../shared/contracts/inventory.js';

function fixture(name: string): string {
  return readFileSync(new URL(`../fixtures/nvidia-smi/${name}`, import.meta.url), 'utf8');
}

describe('NVIDIA_SMI_ARGS', () => {
  it('queries the fields in the order the parser reads them, without headers or units', () => {
    expect(NVIDIA_SMI_ARGS).toEqual([
      '--query-gpu=index,uuid,name,memory.total,memory.used,driver_version,utilization.gpu,temperature.gpu,power.draw',
      '--format=csv,noheader,nounits',
    ]);
    expect(NVIDIA_SMI_QUERY_FIELDS).toHaveLength(9);
  });
});

describe('parseNvidiaSmiCsv', () => {
  it('parses an 8-GPU H100 node', () => {
    const gpus = parseNvidiaSmiCsv(fixture('h100-8x.csv'));
    expect(gpus).toHaveLength(8);
    expect(gpus.map((g) => g.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(new Set(gpus.map((g) => g.uuid)).size).toBe(8);
    expect(gpus[1]).toEqual({
      index: 1,
      uuid: 'GPU-7a0d2e44-1c3f-4e8a-b2d5-5f9c1b3a6e21',
      name: 'NVIDIA H100 80GB HBM3',
      memoryTotalMiB: 81559,
      memoryUsedMiB: 74213,
      unifiedMemory: false,
      driverVersion: '550.54.15',
      utilizationPercent: 98,
      temperatureC: 64,
      powerDrawW: 687.42,
    });
    for (const gpu of gpus) expect(() => GpuDevice.parse(gpu)).not.toThrow();
  });

  it('marks the DGX Spark GB10 as unified memory and leaves memory for the caller', () => {
    const gpus = parseNvidiaSmiCsv(fixture('dgx-spark-gb10.csv'));
    expect(gpus).toEqual([
      {
        index: 0,
        uuid: 'GPU-a4f1e2b3-5c6d-4e7f-8a9b-0c1d2e3f4a5b',
        name: 'NVIDIA GB10',
        memoryTotalMiB: null,
        memoryUsedMiB: null,
        unifiedMemory: true,
        driverVersion: '580.95.05',
        utilizationPercent: 3,
        temperatureC: 41,
        powerDrawW: null,
      },
    ]);
  });

  it('treats a bracketed [N/A] memory.total as unified memory as well', () => {
    const [gpu] = parseNvidiaSmiCsv('0, GPU-x, NVIDIA GB10, [N/A], [N/A], 580.95.05, 0, 40, [N/A]\n');
    expect(gpu?.unifiedMemory).toBe(true);
    expect(gpu?.memoryTotalMiB).toBeNull();
  });

  it('does not mistake an error marker on a discrete card for unified memory', () => {
    const [gpu] = parseNvidiaSmiCsv('0, GPU-x, NVIDIA L40S, [Unknown Error], [Unknown Error], 550.54.15, 0, 40, 80\n');
    expect(gpu?.unifiedMemory).toBe(false);
    expect(gpu?.memoryTotalMiB).toBeNull();
  });

  it('maps [N/A], [Not Supported] and bare N/A to null and skips blank lines and padding', () => {
    const gpus = parseNvidiaSmiCsv(fixture('mixed-na.csv'));
    expect(gpus).toHaveLength(3);
    const [a100, rtx, t4] = gpus;
    expect(a100).toMatchObject({ name: 'NVIDIA A100-SXM4-80GB', utilizationPercent: null, powerDrawW: 61.52 });
    expect(rtx).toMatchObject({ index: 1, uuid: null, name: 'NVIDIA GeForce RTX 4090', powerDrawW: null });
    expect(t4).toMatchObject({
      index: 2,
      name: 'Tesla T4',
      memoryTotalMiB: 15360,
      memoryUsedMiB: null,
      unifiedMemory: false,
      temperatureC: null,
      powerDrawW: 27.81,
    });
  });

  it('strips units when nounits was ignored', () => {
    const csv = '0, GPU-u, NVIDIA H200, 143771 MiB, 512 MiB, 560.35.03, 35 %, 44, 70.50 W\r\n';
    expect(parseNvidiaSmiCsv(csv)).toEqual([
      expect.objectContaining({
        name: 'NVIDIA H200',
        memoryTotalMiB: 143771,
        memoryUsedMiB: 512,
        utilizationPercent: 35,
        temperatureC: 44,
        powerDrawW: 70.5,
      }),
    ]);
  });

  it('skips a header row when noheader was ignored', () => {
    const csv =
      'index, uuid, name, memory.total [MiB], memory.used [MiB], driver_version, utilization.gpu [%], temperature.gpu, power.draw [W]\n' +
      '0, GPU-h, NVIDIA H100 PCIe, 81559 MiB, 0 MiB, 550.54.15, 0 %, 30, 50.00 W\n';
    const gpus = parseNvidiaSmiCsv(csv);
    expect(gpus).toHaveLength(1);
    expect(gpus[0]?.name).toBe('NVIDIA H100 PCIe');
  });

  it('returns no devices for empty output', () => {
    expect(parseNvidiaSmiCsv('\n  \n')).toEqual([]);
  });

  it('throws naming the line of a row with a missing field', () => {
    expect(() => parseNvidiaSmiCsv(fixture('malformed.csv'))).toThrow(/line 2: expected 9 fields, got 8/);
  });

  it('throws naming the line of a non-numeric index', () => {
    const csv = '\nGPU0, GPU-x, NVIDIA H100 80GB HBM3, 81559, 0, 550.54.15, 0, 31, 69.87\n';
    expect(() => parseNvidiaSmiCsv(csv)).toThrow(/line 2: index "GPU0"/);
  });

  it('throws on a non-numeric value in a numeric column', () => {
    const csv = '0, GPU-x, NVIDIA H100 80GB HBM3, 81559, 0, 550.54.15, busy, 31, 69.87\n';
    expect(() => parseNvidiaSmiCsv(csv)).toThrow(/line 1: utilization.gpu "busy"/);
  });
});
