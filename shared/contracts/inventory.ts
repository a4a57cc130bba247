import { z } from 'zod';

export const GpuDevice = z.object({
  index: z.number().int().nonnegative(),
  uuid: z.string().nullable(),
  name: z.string(),
  /** Total memory the GPU can use, in MiB; on unified-memory parts (GB10) it is the host's memory. */
  memoryTotalMiB: z.number().nonnegative().nullable(),
  memoryUsedMiB: z.number().nonnegative().nullable(),
  /** True when the GPU shares system memory (DGX Spark GB10); memory then comes from /proc/meminfo. */
  unifiedMemory: z.boolean(),
  driverVersion: z.string().nullable(),
  utilizationPercent: z.number().min(0).max(100).nullable(),
  temperatureC: z.number().nullable(),
  powerDrawW: z.number().nullable(),
});
export type GpuDevice = z.infer<typeof GpuDevice>;

export const Inventory = z.object({
  hostname: z.string().max(255),
  os: z.string().max(64),
  arch: z.string().max(32),
  cpus: z.number().int().nonnegative(),
  cpuModel: z.string().max(255).nullable(),
  memoryTotalMiB: z.number().nonnegative(),
  memoryAvailableMiB: z.number().nonnegative().nullable(),
  diskFreeMiB: z.number().nonnegative().nullable(),
  gpus: z.array(GpuDevice).max(64),
  agentVersion: z.string().max(64),
});
export type Inventory = z.infer<typeof Inventory>;
