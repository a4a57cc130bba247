export { collectInventory, sampleGpus } from './collect.js';
export type { ReadTextFile, RunCommand } from './collect.js';
export { parseMeminfo } from './meminfo.js';
export { NVIDIA_SMI_ARGS, NVIDIA_SMI_QUERY_FIELDS, parseNvidiaSmiCsv } from './nvidia-smi.js';
