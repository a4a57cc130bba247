#!/usr/bin/env node
// The simulator's stand-in for nvidia-smi (LUNANEXA_AGENT_NVIDIA_SMI on simulated nodes): one NVIDIA GB10 with
// unified memory, as a DGX Spark has, so that a simulated node declares a GPU and runs reserve it. It answers only
// the query the agent makes (agent/inventory/nvidia-smi.ts), in its CSV: memory.total and memory.used are not
// reported on a unified-memory part, and the agent takes the host's memory for them.
console.log('0, [N/A], NVIDIA GB10, [N/A], [N/A], 580.95.05, 0, 40, 5.00');
