import { readFileSync } from 'node:fs';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { NVIDIA_SMI_ARGS, collectInventory, parseMeminfo } from '../../agent/inventory/index.js';
import type { ReadTextFile, RunCommand } from '../../agent/inventory/index.js';
import { Inventory } from '../../shared/contracts/inventory.js';

function fixture(name: string): string {
  return readFileSync(new URL(`../fixtures/nvidia-smi/${name}`, import.meta.url), 'utf8');
}

// A DGX Spark reports roughly 128 GB of LPDDR5x, shared between CPU and GPU.
const SPARK_MEMINFO = [
  'MemTotal:       127543724 kB',
  'MemFree:         98304000 kB',
  'MemAvailable:   118123456 kB',
  'Buffers:           524288 kB',
  'HugePages_Total:        0',
  '',
].join('\n');
const SPARK_TOTAL_MIB = 124554; // floor(127543724 / 1024)
const SPARK_AVAILABLE_MIB = 115354; // floor(118123456 / 1024)

const enoent: RunCommand = async (cmd) => {
  throw Object.assign(new Error(`spawn ${cmd} ENOENT`), { code: 'ENOENT', errno: -2, syscall: `spawn ${cmd}` });
};

function stdoutOf(csv: string): RunCommand {
  return async () => ({ code: 0, stdout: csv });
}

const meminfo =
  (text: string): ReadTextFile =>
  async (path) => {
    if (path !== '/proc/meminfo') throw new Error(`unexpected read of ${path}`);
    return text;
  };

const unreadable: ReadTextFile = async (path) => {
  throw Object.assign(new Error(`ENOENT: no such file or directory, open '${path}'`), { code: 'ENOENT' });
};

describe('parseMeminfo', () => {
  it('converts kB to whole MiB', () => {
    expect(parseMeminfo(SPARK_MEMINFO)).toEqual({ totalMiB: SPARK_TOTAL_MIB, availableMiB: SPARK_AVAILABLE_MIB });
  });

  it('reports available as null on kernels without MemAvailable', () => {
    expect(parseMeminfo('MemTotal:        2048000 kB\nMemFree:          1024000 kB\n')).toEqual({
      totalMiB: 2000,
      availableMiB: null,
    });
  });

  it('throws when MemTotal is missing', () => {
    expect(() => parseMeminfo('MemFree: 1024 kB\n')).toThrow(/MemTotal/);
  });
});

describe('collectInventory', () => {
  it('reports no GPUs when nvidia-smi is not installed', async () => {
    const inv = await collectInventory({ agentVersion: '1.2.3', run: enoent, readFile: meminfo(SPARK_MEMINFO) });
    expect(inv.gpus).toEqual([]);
    expect(inv.agentVersion).toBe('1.2.3');
    expect(inv.memoryTotalMiB).toBe(SPARK_TOTAL_MIB);
    expect(inv.memoryAvailableMiB).toBe(SPARK_AVAILABLE_MIB);
  });

  it('reports no GPUs when nvidia-smi exits non-zero', async () => {
    const failing: RunCommand = async () => ({
      code: 9,
      stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    });
    const inv = await collectInventory({ agentVersion: '1.2.3', run: failing, readFile: meminfo(SPARK_MEMINFO) });
    expect(inv.gpus).toEqual([]);
  });

  it('asks nvidia-smi for the fields the parser expects', async () => {
    const calls: Array<[string, string[]]> = [];
    const recording: RunCommand = async (cmd, args) => {
      calls.push([cmd, args]);
      return { code: 0, stdout: fixture('h100-8x.csv') };
    };
    const inv = await collectInventory({ agentVersion: '1.2.3', run: recording, readFile: meminfo(SPARK_MEMINFO) });
    expect(calls).toEqual([['nvidia-smi', [...NVIDIA_SMI_ARGS]]]);
    expect(inv.gpus).toHaveLength(8);
    expect(inv.gpus.every((g) => !g.unifiedMemory && g.memoryTotalMiB === 81559)).toBe(true);
  });

  it('fills a GB10 memory from /proc/meminfo', async () => {
    const inv = await collectInventory({
      agentVersion: '1.2.3',
      run: stdoutOf(fixture('dgx-spark-gb10.csv')),
      readFile: meminfo(SPARK_MEMINFO),
    });
    expect(Inventory.parse(inv)).toEqual(inv);
    expect(inv.gpus).toHaveLength(1);
    expect(inv.gpus[0]).toMatchObject({
      name: 'NVIDIA GB10',
      unifiedMemory: true,
      memoryTotalMiB: SPARK_TOTAL_MIB,
      memoryUsedMiB: SPARK_TOTAL_MIB - SPARK_AVAILABLE_MIB,
      powerDrawW: null,
    });
  });

  it('leaves a GB10 used memory null when the kernel does not report MemAvailable', async () => {
    const inv = await collectInventory({
      agentVersion: '1.2.3',
      run: stdoutOf(fixture('dgx-spark-gb10.csv')),
      readFile: meminfo('MemTotal:       127543724 kB\n'),
    });
    expect(inv.gpus[0]).toMatchObject({ memoryTotalMiB: SPARK_TOTAL_MIB, memoryUsedMiB: null });
  });

  it('falls back to os memory figures when /proc/meminfo cannot be read', async () => {
    const inv = await collectInventory({ agentVersion: '1.2.3', run: enoent, readFile: unreadable });
    expect(inv.memoryTotalMiB).toBe(Math.floor(os.totalmem() / 1024 / 1024));
    expect(inv.memoryAvailableMiB).not.toBeNull();
  });

  it('surfaces malformed output from a working nvidia-smi', async () => {
    await expect(collectInventory({ agentVersion: '1.2.3', run: stdoutOf(fixture('malformed.csv')), readFile: meminfo(SPARK_MEMINFO) })).rejects.toThrow(
      /line 2/,
    );
  });

  it('collects a valid inventory from this machine with the real defaults', async () => {
    const inv = await collectInventory({ agentVersion: '0.0.0-test' });
    expect(() => Inventory.parse(inv)).not.toThrow();
    expect(inv.cpus).toBeGreaterThan(0);
    expect(inv.memoryTotalMiB).toBeGreaterThan(0);
    expect(inv.arch).toBe(process.arch);
    expect(inv.hostname).toBe(os.hostname());
  });
});
