#!/usr/bin/env node
// The simulator's stand-in for nvidia-smi (LUNANEXA_AGENT_NVIDIA_SMI on simulated nodes): one NVIDIA GB10 with
// unified memory, as a DGX Spark has, so that a simulated node declares a GPU and runs reserve it. It answers the one
// query the agent makes (agent/inventory/nvidia-smi.ts: at enrollment, and every few seconds for telemetry) in
// nvidia-smi's CSV, and refuses any other: the GB10 under its node's load, so that utilisation, temperature and power
// move as a real GPU's do. memory.total and memory.used are [N/A] on a unified-memory part, and the agent takes the
// host's memory for them.
// The load is what the node's runtimes say of themselves: the fake reads the runtime records the agent keeps in its
// state dir (LUNANEXA_AGENT_STATE_DIR, which simulated nodes set; without it the node is idle) and asks each runtime's
// /metrics with its token, as the agent itself would. Their KV-cache use (vllm:gpu_cache_usage_perc: running
// sequences over capacity), summed and capped at 1, is the GPU's load. No file is written anywhere: a runtime that
// stopped or hangs simply counts as idle.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

const FORMAT = '--format=csv,noheader,nounits';
const QUERY = ['--query-gpu=index,uuid,name,memory.total,memory.used,driver_version,utilization.gpu,temperature.gpu,power.draw', FORMAT];

// The agent's own nvidia-smi call gives up after 5 s; a runtime too busy to answer in this long is taken as idle.
const METRICS_TIMEOUT_MS = 500;

// A GB10 from idle to flat out.
const IDLE_C = 40;
const BUSY_C = 75;
const IDLE_W = 5;
const BUSY_W = 100;

const asked = (query) => process.argv.length === 2 + query.length && query.every((arg, i) => process.argv[2 + i] === arg);

/** One runtime's KV-cache use in 0..1, or 0 when it does not answer. */
async function runtimeLoad(file) {
  const record = await readFile(file, 'utf8').then(JSON.parse, () => null);
  if (typeof record?.baseUrl !== 'string') return 0;
  const response = await fetch(`${record.baseUrl}/metrics`, {
    headers: typeof record.token === 'string' ? { authorization: `Bearer ${record.token}` } : {},
    signal: AbortSignal.timeout(METRICS_TIMEOUT_MS),
  }).catch(() => null);
  if (!response?.ok) return 0;
  const text = await response.text().catch(() => '');
  let usage = 0;
  for (const match of text.matchAll(/^vllm:gpu_cache_usage_perc(?:\{[^}]*\})?\s+(\S+)/gm)) {
    const value = Number(match[1]);
    if (Number.isFinite(value) && value > 0) usage += value;
  }
  return usage;
}

/** The node's load in 0..1: its runtimes' loads added up. */
async function nodeLoad() {
  const stateDir = process.env.LUNANEXA_AGENT_STATE_DIR;
  if (!stateDir) return 0;
  const dir = join(stateDir, 'runtimes');
  const names = await readdir(dir).catch(() => []);
  const loads = await Promise.all(names.filter((name) => name.endsWith('.json')).map((name) => runtimeLoad(join(dir, name))));
  return Math.min(
    1,
    loads.reduce((sum, load) => sum + load, 0),
  );
}

if (asked(QUERY)) {
  const load = await nodeLoad();
  // Rounded up: a node with any sequence running never reads as idle.
  const utilization = Math.ceil(100 * load);
  const temperature = Math.round(IDLE_C + (BUSY_C - IDLE_C) * load);
  const power = (IDLE_W + (BUSY_W - IDLE_W) * load).toFixed(2);
  console.log(`0, [N/A], NVIDIA GB10, [N/A], [N/A], 580.95.05, ${utilization}, ${temperature}, ${power}`);
} else {
  console.error(`sim nvidia-smi: unknown query; it answers only\n  nvidia-smi ${QUERY.join(' ')}`);
  process.exitCode = 2;
}
