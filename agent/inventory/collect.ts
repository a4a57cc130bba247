import { execFile } from 'node:child_process';
import { readFile as fsReadFile, statfs } from 'node:fs/promises';
import os from 'node:os';
import type { GpuDevice } from '../../shared/contracts/inventory.js';
import { Inventory } from '../../shared/contracts/inventory.js';
import { parseMeminfo } from './meminfo.js';
import type { MeminfoSummary } from './meminfo.js';
import { NVIDIA_SMI_ARGS, parseNvidiaSmiCsv } from './nvidia-smi.js';

/** Runs a command; resolves with its exit code, rejects when it cannot be started or times out. */
export type RunCommand = (cmd: string, args: string[]) => Promise<{ code: number; stdout: string }>;

/** Reads a text file. */
export type ReadTextFile = (path: string) => Promise<string>;

export interface CollectInventoryOptions {
  agentVersion: string;
  /** The nvidia-smi to run (LUNANEXA_AGENT_NVIDIA_SMI): `nvidia-smi` on the search path unless told otherwise. */
  nvidiaSmi?: string;
  run?: RunCommand;
  readFile?: ReadTextFile;
}

// A wedged driver can make nvidia-smi hang for minutes; the inventory must not wait on it.
const NVIDIA_SMI_TIMEOUT_MS = 5_000;
const MIB = 1024 * 1024;

const execFileRun: RunCommand = (cmd, args) =>
  new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: NVIDIA_SMI_TIMEOUT_MS, encoding: 'utf8' }, (error, stdout) => {
      if (!error) return resolve({ code: 0, stdout });
      // A numeric code is the exit status; a string code (ENOENT, EACCES) or a kill means it never ran to completion.
      if (typeof error.code === 'number') return resolve({ code: error.code, stdout });
      reject(error);
    });
  });

const readUtf8: ReadTextFile = (path) => fsReadFile(path, 'utf8');

async function readHostMemory(readFile: ReadTextFile): Promise<MeminfoSummary> {
  try {
    return parseMeminfo(await readFile('/proc/meminfo'));
  } catch {
    // Not Linux (a developer's macOS) or a sandbox hiding /proc: freemem is the closest stand-in.
    return { totalMiB: Math.floor(os.totalmem() / MIB), availableMiB: Math.floor(os.freemem() / MIB) };
  }
}

async function readGpus(run: RunCommand, nvidiaSmi: string): Promise<GpuDevice[]> {
  let result: { code: number; stdout: string };
  try {
    result = await run(nvidiaSmi, [...NVIDIA_SMI_ARGS]);
  } catch {
    // Missing binary (ENOENT) or a timeout: the host has no usable NVIDIA GPU.
    return [];
  }
  // Non-zero exit is how nvidia-smi reports "no driver loaded" or "no devices found".
  if (result.code !== 0) return [];
  // Malformed output from a working nvidia-smi is a real fault and is left to surface.
  return parseNvidiaSmiCsv(result.stdout);
}

async function diskFreeMiB(path: string): Promise<number | null> {
  try {
    const stats = await statfs(path);
    return Math.floor((stats.bavail * stats.bsize) / MIB);
  } catch {
    return null;
  }
}

/** Unified-memory GPUs (DGX Spark GB10) report no memory of their own: theirs is the host's. */
function withHostMemory(gpus: GpuDevice[], memory: MeminfoSummary): GpuDevice[] {
  const hostUsedMiB = memory.availableMiB === null ? null : Math.max(0, memory.totalMiB - memory.availableMiB);
  return gpus.map((gpu) => (gpu.unifiedMemory ? { ...gpu, memoryTotalMiB: memory.totalMiB, memoryUsedMiB: hostUsedMiB } : gpu));
}

/**
 * The GPUs as they are now, for telemetry (docs/telemetry.md): the inventory's query, unified memory filled from
 * the host's. None where nvidia-smi is missing or fails; malformed output throws, as for the inventory.
 */
export async function sampleGpus(opts: Pick<CollectInventoryOptions, 'nvidiaSmi' | 'run' | 'readFile'>): Promise<GpuDevice[]> {
  const [memory, gpus] = await Promise.all([readHostMemory(opts.readFile ?? readUtf8), readGpus(opts.run ?? execFileRun, opts.nvidiaSmi ?? 'nvidia-smi')]);
  return withHostMemory(gpus, memory);
}

/**
 * Collects the host and GPU inventory the agent reports to the control plane.
 *
 * A missing or failing nvidia-smi yields `gpus: []`. Unified-memory GPUs (DGX Spark GB10) get the
 * host's MemTotal as their memory and MemTotal - MemAvailable as used.
 *
 * @param opts.run command runner, defaults to execFile with a 5 s timeout
 * @param opts.readFile text file reader, defaults to fs/promises
 * @returns an inventory already validated by `Inventory.parse`
 * @throws Error when nvidia-smi succeeds but prints output that cannot be parsed
 */
export async function collectInventory(opts: CollectInventoryOptions): Promise<Inventory> {
  const run = opts.run ?? execFileRun;
  const readFile = opts.readFile ?? readUtf8;

  const [memory, rawGpus, diskFree] = await Promise.all([readHostMemory(readFile), readGpus(run, opts.nvidiaSmi ?? 'nvidia-smi'), diskFreeMiB(process.cwd())]);

  const gpus = withHostMemory(rawGpus, memory);

  const cpus = os.cpus();
  return Inventory.parse({
    hostname: os.hostname(),
    os: os.platform(),
    arch: os.arch(),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model.trim() || null,
    memoryTotalMiB: memory.totalMiB,
    memoryAvailableMiB: memory.availableMiB,
    diskFreeMiB: diskFree,
    gpus,
    agentVersion: opts.agentVersion,
  });
}
