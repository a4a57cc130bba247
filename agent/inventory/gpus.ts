import { collectInventory } from './collect.js';

/**
 * The machine's GPU indices, read once, when a runtime first asks for GPUs: a machine without any never waits on
 * nvidia-smi for it.
 */
export function lazyGpuIndices(agentVersion: string, nvidiaSmi?: string): () => Promise<number[]> {
  let gpus: Promise<number[]> | undefined;
  return () =>
    (gpus ??= collectInventory({ agentVersion, nvidiaSmi }).then(
      (inventory) => inventory.gpus.map((gpu) => gpu.index),
      (error: unknown) => {
        // The launch that asked fails with this error; the next one asks again.
        gpus = undefined;
        throw error;
      },
    ));
}
