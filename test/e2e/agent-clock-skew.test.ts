import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { MachineView } from '../../shared/contracts/machine.js';
import { ServerTime } from '../../shared/contracts/time.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';
import { loadIdentity } from '../../agent/state.js';
import { enrollTestMachine, heartbeatBody, type TestMachine } from '../helpers/machine.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/** Debian's libfaketime (package faketime), under the multiarch directory of this machine. */
const LIBFAKETIME = readdirSync('/usr/lib')
  .filter((dir) => dir.endsWith('-linux-gnu'))
  .map((dir) => `/usr/lib/${dir}/faketime/libfaketime.so.1`)
  .find((path) => existsSync(path));

/** The environment that runs a process with its wall clock `offset` off (e.g. `+600s`); its timers keep real time. */
const fakeClock = (offset: string): NodeJS.ProcessEnv => ({ LD_PRELOAD: LIBFAKETIME!, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1' });

const HEARTBEAT = '/agent/v1/heartbeat';

/**
 * A machine whose clock is off (docs/design.md section 4): the control plane tolerates a few seconds either way and
 * names the clock when it refuses more; a real agent 10 min ahead or behind measures its offset, signs with the
 * corrected time, works, and tells the operator to fix its time.
 */
describe('clock skew', () => {
  let plane: TestPlane;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: STEADY_LIVENESS });
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  describe('machine tokens', () => {
    let machine: TestMachine;
    let seq = 0;

    beforeAll(async () => {
      machine = await enrollTestMachine(plane, 'clock-probe');
    });

    /** Sends `method path` signed as if the machine's clock were `skewMs` ahead (negative: behind). */
    async function signedAt(skewMs: number, method: string, path: string, body = '') {
      const jwt = await signMachineRequest({
        key: machine.key,
        kid: machine.credentialId,
        machineId: machine.machineId,
        clusterId: machine.clusterId,
        method,
        path,
        body,
        nowMs: Date.now() + skewMs,
      });
      return await fetch(`${plane.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: body.length ? body : undefined,
      });
    }
    const heartbeatAt = (skewMs: number) => signedAt(skewMs, 'POST', HEARTBEAT, JSON.stringify(heartbeatBody(machine, ++seq)));

    async function refusal(response: Response) {
      expect(response.status).toBe(401);
      return ((await response.json()) as { error: { code: string; message: string; details: { reason: string; clockSkewS: number } } }).error;
    }

    it('GET /agent/v1/time answers the control plane clock, uncached, without credentials', async () => {
      const before = Date.now();
      const response = await fetch(`${plane.url}/agent/v1/time`);
      const after = Date.now();
      expect(response.status).toBe(200);
      expect(response.headers.get('cache-control')).toBe('no-store');
      const { now } = ServerTime.parse(await response.json());
      // PGlite runs in this process: the database's clock is this machine's.
      expect(now).toBeGreaterThanOrEqual(before - 50);
      expect(now).toBeLessThanOrEqual(after + 50);
    });

    it('accepts a token issued 3 s in the future, and one from a clock 3 s behind', async () => {
      expect((await heartbeatAt(3_000)).status).toBe(200);
      expect((await heartbeatAt(-3_000)).status).toBe(200);
    });

    it('refuses a token issued 60 s in the future with clock_skew, naming the clock and the difference', async () => {
      const error = await refusal(await heartbeatAt(60_000));
      expect(error.code).toBe('clock_skew');
      expect(error.message).toMatch(/^the machine's clock is (59|60) s ahead of the control plane's \(.*\); fix its time \(NTP\)$/);
      expect(error.details).toMatchObject({ reason: 'iat' });
      expect(error.details.clockSkewS).toBeGreaterThanOrEqual(59);
    });

    it('refuses a token from a clock 90 s behind (expired on arrival) with clock_skew, naming the clock', async () => {
      const error = await refusal(await heartbeatAt(-90_000));
      expect(error.code).toBe('clock_skew');
      expect(error.message).toMatch(
        /^the machine's clock is (90|91) s behind the control plane's \(the token was issued \d+ s ago and expired \d+ s ago\); fix its time \(NTP\)$/,
      );
      expect(error.details).toMatchObject({ reason: 'expired' });
    });

    it('refuses the stream alike', async () => {
      const error = await refusal(await signedAt(600_000, 'GET', '/agent/v1/stream'));
      expect(error.code).toBe('clock_skew');
      expect(error.message).toMatch(/^the machine's clock is (599|600) s ahead/);
    });
  });

  describe('a real agent 10 min off', () => {
    const nodes: SimNode[] = [];

    beforeAll(async () => {
      if (!LIBFAKETIME) throw new Error("libfaketime is missing: install Debian's faketime package");
      const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(Date.now()))'], {
        env: { ...process.env, ...fakeClock('+600s') },
        encoding: 'utf8',
      });
      const ahead = Number(child.stdout) - Date.now();
      if (!(Math.abs(ahead - 600_000) < 10_000)) throw new Error(`libfaketime does not move node's clock here (a child read ${child.stdout || child.stderr})`);
      // One replica on each machine (one replica per machine): both must take and run their desired state.
      await seedDemoDeployment(plane, 2, { loadMs: 300, memoryMiB: 64 });
      const root = join(plane.dataDir, 'nodes');
      nodes.push(await startSimNode(plane, 'clock-ahead', root, { env: fakeClock('+600s') }));
      nodes.push(await startSimNode(plane, 'clock-behind', root, { env: fakeClock('-600s') }));
    }, 120_000);
    afterAll(async () => {
      await stopSimNodes(nodes.filter((n) => n.process.exitCode === null && n.process.signalCode === null));
    });

    const machineOf = async (node: SimNode) => {
      const { machineId } = (await loadIdentity(node.stateDir))!;
      const response = await plane.admin(`/api/v1/machines/${machineId}`);
      return MachineView.parse(await response.json());
    };

    it.each([
      ['clock-ahead', 'ahead of'],
      ['clock-behind', 'behind'],
    ])('%s enrolls, becomes ready with a ready runtime, and logs the clock warning', async (name, side) => {
      const node = nodes.find((n) => n.name === name)!;
      const machine = await waitFor(
        async () => {
          const view = await machineOf(node);
          return view.state === 'ready' && view.streamAttached && view.runtimes.some((r) => r.state === 'ready') ? view : null;
        },
        { timeoutMs: 90_000, intervalMs: 250, what: `${name} to be ready with a ready runtime` },
      );
      expect(machine.runtimes).toHaveLength(1);
      const log = await readFile(node.logFile, 'utf8');
      const warnings = log
        .split('\n')
        .filter((line) => line.includes('"event":"clock skew"'))
        .map((line) => JSON.parse(line) as { offsetMs: number; warning: string });
      expect(warnings.length).toBeGreaterThanOrEqual(2); // at enrollment and at start
      for (const warning of warnings) {
        expect(warning.warning).toMatch(
          new RegExp(`^this machine's clock is (599|600|601)\\.\\d s ${side} the control plane's: .*fix this machine's time \\(NTP\\)$`),
        );
        expect(Math.abs(Math.abs(warning.offsetMs) - 600_000)).toBeLessThan(1_000);
      }
      expect(log).not.toContain('"code":"clock_skew"');
    });

    it('serves inference on both: deadlines in the control plane clock are kept in the agent clock', async () => {
      for (let i = 0; i < 6; i++) {
        const response = await fetch(`${plane.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
        });
        expect(response.status, await response.clone().text()).toBe(200);
        await response.text();
      }
    }, 60_000);
  });
});
