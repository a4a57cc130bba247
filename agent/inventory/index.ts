export { collectInventory } from './collect.js';
export type { CollectInventoryOptions, ReadTextFile, RunCommand } from './collect.js';
export { parseMeminfo } from './meminfo.js';
export type { MeminfoSummary } from './meminfo.js';
export { NVIDIA_SMI_ARGS, NVIDIA_SMI_QUERY_FIELDS, parseNvidiaSmiCsv } from './nvidia-smi.js';
