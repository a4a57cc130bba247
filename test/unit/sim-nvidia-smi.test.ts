import { execFile } from 'node:child_process';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NVIDIA_SMI_ARGS, parseNvidiaSmiCsv } from '../../agent/inventory/nvidia-smi.js';
import type { SimServerHandle } from '../../sim/options.js';
import { startSim, timedStream, sampleValue, waitForMetrics } from '../helpers/sim-server.js';

/**
 * The simulator's nvidia-smi (sim/nvidia-smi.mjs): the agent's one query (inventory and telemetry), whose GB10 follows
 * the load of the node's simulated runtimes, found through the agent's runtime records.
 */

const FAKE = fileURLToPath(new URL('../../sim/nvidia-smi.mjs', import.meta.url));
const TOKEN = 'nvidia-smi-test-token';

function nvidiaSmi(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [FAKE, ...args], { env: { PATH: process.env.PATH, ...env }, timeout: 10_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** The telemetry line's numbers: utilisation (%), temperature (C) and power (W). */
async function telemetry(stateDir: string): Promise<{ utilization: number; temperature: number; power: number }> {
  const { code, stdout } = await nvidiaSmi(NVIDIA_SMI_ARGS, { LUNANEXA_AGENT_STATE_DIR: stateDir });
  expect(code).toBe(0);
  const [gpu] = parseNvidiaSmiCsv(stdout);
  return { utilization: gpu!.utilizationPercent!, temperature: gpu!.temperatureC!, power: gpu!.powerDrawW! };
}

describe('sim nvidia-smi', () => {
  let stateDir: string;
  let server: SimServerHandle;

  beforeAll(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'sim-nvidia-smi-'));
    server = await startSim({ token: TOKEN, maxSequences: 2, tokensPerSecond: 10 });
    await mkdir(join(stateDir, 'runtimes'));
    // As the agent records its runtimes; one whose process is gone counts as idle.
    await writeFile(join(stateDir, 'runtimes', 'asg_live.json'), JSON.stringify({ assignmentId: 'asg_live', baseUrl: server.url, token: TOKEN }));
    await writeFile(join(stateDir, 'runtimes', 'asg_gone.json'), JSON.stringify({ assignmentId: 'asg_gone', baseUrl: 'http://127.0.0.1:1', token: TOKEN }));
    await writeFile(join(stateDir, 'runtimes', 'asg_live.log'), 'not a record');
  });

  afterAll(async () => {
    await server?.close();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it('answers the inventory query of an idle node as it always has: one idle GB10 with unified memory', async () => {
    const { code, stdout } = await nvidiaSmi(NVIDIA_SMI_ARGS, { LUNANEXA_AGENT_STATE_DIR: stateDir });
    expect(code).toBe(0);
    expect(stdout).toBe('0, [N/A], NVIDIA GB10, [N/A], [N/A], 580.95.05, 0, 40, 5.00\n');
    expect(parseNvidiaSmiCsv(stdout)).toMatchObject([{ index: 0, name: 'NVIDIA GB10', unifiedMemory: true }]);
  });

  it("answers with the node's load: busier while sequences run than idle", async () => {
    const idle = await telemetry(stateDir);
    expect(idle).toEqual({ utilization: 0, temperature: 40, power: 5 });

    // Two sequences fill both slots for at least 1.9 s.
    const streams = [timedStream(server, 20, TOKEN), timedStream(server, 20, TOKEN)];
    await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_running') === 2, TOKEN);
    const busy = await telemetry(stateDir);
    expect(busy.utilization).toBeGreaterThan(idle.utilization);
    expect(busy.utilization).toBeLessThanOrEqual(100);
    expect(busy.temperature).toBeGreaterThan(idle.temperature);
    expect(busy.power).toBeGreaterThan(idle.power);
    await Promise.all(streams);
  });

  it('is idle on a node whose state dir it is not told', async () => {
    expect(await telemetry('')).toEqual({ utilization: 0, temperature: 40, power: 5 });
  });

  it('refuses any other query, naming the one it answers', async () => {
    const { code, stdout, stderr } = await nvidiaSmi(['--query-gpu=index,name', '--format=csv']);
    expect(code).not.toBe(0);
    expect(stdout).toBe('');
    expect(stderr).toContain(NVIDIA_SMI_ARGS[0]);
  });
});
