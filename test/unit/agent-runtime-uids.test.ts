import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomInt } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AgentPolicy } from '../../agent/policy.js';
import { inUidRange, runtimeUsers, uidRangeProblem, type RuntimeUsers, type UidRange } from '../../agent/runtime-user.js';
import type { RuntimeAdapter, RuntimeHandle } from '../../agent/runtimes/adapter.js';
import { createAdapters } from '../../agent/runtimes/adapters.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { takeRunAs } from '../../agent/runtimes/simulated.js';
import { lowestFreeUid } from '../../agent/runtimes/uids.js';
import { ensureStateDir, secureStateDir } from '../../agent/state.js';
import type { Assignment } from '../../shared/contracts/desired.js';

/**
 * Each runtime runs as a uid of its own, from a range the local policy gives the agent (security review L5: runtimes
 * that share one user read one another's environment and signal one another).
 */

const root = process.getuid?.() === 0;

describe("the local policy's runAs", () => {
  const parse = (runAs: unknown) => AgentPolicy.safeParse({ runAs });

  it('takes a range of uids with their one group, beside the single user, never both', () => {
    expect(parse({ uids: { first: 2_000_000_000, count: 64 }, group: 'lunanexa-runtime' }).data?.runAs).toEqual({
      uids: { first: 2_000_000_000, count: 64 },
      group: 'lunanexa-runtime',
    });
    expect(parse({ uids: { first: 2_000_000_000, count: 64 }, group: 2_000_000_000 }).success).toBe(true);
    expect(parse({ user: 'lunanexa-runtime', group: 'video' }).success).toBe(true);
    for (const runAs of [
      { uids: { first: 2_000_000_000, count: 64 } },
      { user: 'lunanexa-runtime', uids: { first: 2_000_000_000, count: 64 }, group: 'g' },
      {},
      { group: 'g' },
      { uids: { first: 0, count: 64 }, group: 'g' },
      { uids: { first: 2_000_000_000, count: 0 }, group: 'g' },
      { uids: { first: 2_000_000_000, count: 5000 }, group: 'g' },
      { uids: { first: 2 ** 31 - 10, count: 64 }, group: 'g' },
      { uids: { first: 2_000_000_000, count: 64, last: 2_000_000_063 }, group: 'g' },
      { uids: { first: 2_000_000_000, count: 64 }, group: 0 },
    ]) {
      expect(parse(runAs).success, JSON.stringify(runAs)).toBe(false);
    }
    expect(parse({ uids: { first: 2_000_000_000, count: 64 } }).error?.issues.map((issue) => issue.message)).toEqual(['uids needs a group']);
  });

  it('hands out the lowest uid of the range that is neither held nor in use', () => {
    const range = { first: 100, count: 4 };
    expect(lowestFreeUid(range, new Set(), new Set())).toBe(100);
    expect(lowestFreeUid(range, new Set([100]), new Set([101, 0]))).toBe(102);
    expect(lowestFreeUid(range, new Set([100, 102]), new Set([101, 103]))).toBeNull();
  });

  it('gives the simulated runtime the ids it switches to only as its first flag, as <uid>:<gid>', () => {
    expect(takeRunAs(['--run-as', '7:8', '--model', 'm'])).toEqual({ ids: { uid: 7, gid: 8 }, rest: ['--model', 'm'] });
    expect(takeRunAs(['--model', 'm'])).toEqual({ ids: null, rest: ['--model', 'm'] });
    expect(() => takeRunAs(['--run-as', 'nobody'])).toThrow('--run-as takes <uid>:<gid>, not nobody');
  });
});

describe('a range that is not the agent’s own is refused', () => {
  it('names the account that holds a uid of it, and uid 0', async () => {
    // 65534 is nobody on every Linux: the account that other software on the host runs as too.
    expect(await uidRangeProblem({ first: 65_530, count: 8 })).toMatch(/^uid 65534 is nobody's/);
    expect(await uidRangeProblem({ first: 0, count: 8 })).toBe('it holds uid 0 (root)');
    const policy = AgentPolicy.parse({ runAs: { uids: { first: 65_530, count: 8 }, group: 2_000_000_000 } });
    await expect(runtimeUsers(policy, true)).rejects.toThrow(/^the local policy's runAs uids 65530-65537 are not the agent's own: uid 65534 is nobody's/);
  });

  it("refuses root's group and a group name the system does not know", async () => {
    const uids = await freeRange();
    await expect(runtimeUsers(AgentPolicy.parse({ runAs: { uids, group: 'root' } }), true)).rejects.toThrow(/group root is root's/);
    await expect(runtimeUsers(AgentPolicy.parse({ runAs: { uids, group: 'lnx-no-such-group' } }), true)).rejects.toThrow(
      /group lnx-no-such-group does not exist/,
    );
    expect(await runtimeUsers(AgentPolicy.parse({ runAs: { uids, group: uids.first } }), true)).toEqual({ kind: 'range', uids, gid: uids.first });
  });
});

/** 16 uids no account holds, in the block systemd leaves unused; random, so that test runs side by side rarely meet. */
async function freeRange(): Promise<UidRange> {
  for (;;) {
    const range = { first: 2_140_000_000 + randomInt(0, 400_000) * 16, count: 16 };
    if ((await uidRangeProblem(range)) === null) return range;
  }
}

/** The uids of a process (real, effective, saved, file system), from /proc. */
async function uidsOf(pid: number): Promise<number[]> {
  return /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m
    .exec(await readFile(`/proc/${pid}/status`, 'utf8'))!
    .slice(1)
    .map(Number);
}

describe.skipIf(!root)('each runtime a uid of the range (root only: only root switches users)', () => {
  let stateDir: string;
  let range: UidRange;
  let users: RuntimeUsers;
  const handles: RuntimeHandle[] = [];
  const strangers: ChildProcess[] = [];
  const logged: string[] = [];
  const policy = AgentPolicy.parse({ templates: { sleep: { executable: '/usr/bin/sleep' } } });
  let sleepSha256: string;

  /** The adapter of an agent on the state dir (another one is the agent started again). */
  const adapter = (runAs: RuntimeUsers = users): RuntimeAdapter =>
    createAdapters({ stateDir, policy, users: runAs, log: (event) => void logged.push(event) }).template;
  const sleeper = (assignmentId: string): Assignment => ({
    assignmentId,
    deploymentId: 'dep_uids',
    deploymentName: 'uids',
    model: 'uids',
    deploymentGeneration: 1,
    runtime: { kind: 'template', template: 'sleep', executable: '/usr/bin/sleep', executableSha256: sleepSha256, args: ['60'], env: {}, healthPath: '/health' },
    artifact: null,
    restartPolicy: { mode: 'never', maxRestarts: 0, backoffMs: 100 },
    resources: { gpus: 0, memoryMiB: 1 },
    startup: { timeoutMs: 60_000, probeIntervalMs: 100, failureThreshold: 3 },
    templateHash: 'template-sleep',
  });
  const start = async (on: RuntimeAdapter, assignmentId: string) => {
    const handle = await on.start(sleeper(assignmentId));
    handles.push(handle);
    return handle;
  };

  beforeAll(async () => {
    sleepSha256 = createHash('sha256')
      .update(await readFile('/usr/bin/sleep'))
      .digest('hex');
  });
  beforeEach(async () => {
    range = await freeRange();
    range = { first: range.first, count: 4 };
    users = (await runtimeUsers(AgentPolicy.parse({ runAs: { uids: range, group: range.first } }), true))!;
    stateDir = await mkdtemp(join(tmpdir(), 'lnx-uids-'));
    await ensureStateDir(stateDir);
    // As the agent does at start: its runtimes' group may pass through the state dir to their homes.
    await secureStateDir(stateDir, { runtimeUid: (uid) => inUidRange(range, uid), group: range.first });
    logged.length = 0;
  });
  afterEach(async () => {
    for (const handle of handles.splice(0)) {
      try {
        process.kill(-handle.pid, 'SIGKILL');
      } catch {
        // Stopped by the test.
      }
    }
    for (const stranger of strangers.splice(0)) stranger.kill('SIGKILL');
    await rm(stateDir, { recursive: true, force: true });
  });

  it('gives each launch a uid of its own with a home of its own, and hands a stopped runtime’s uid out again, its home emptied', async () => {
    const on = adapter();
    const a = await start(on, 'asg_a');
    const b = await start(on, 'asg_b');
    expect([a.uid, b.uid]).toEqual([range.first, range.first + 1]);
    expect(await uidsOf(a.pid)).toEqual([a.uid, a.uid, a.uid, a.uid]);
    expect(await uidsOf(b.pid)).toEqual([b.uid, b.uid, b.uid, b.uid]);
    // Kept in its record, for the agent started again.
    expect(JSON.parse(await readFile(join(stateDir, 'runtimes', 'asg_a.json'), 'utf8'))).toMatchObject({ uid: a.uid });
    const home = join(stateDir, 'homes', String(a.uid));
    expect((await readFile(`/proc/${a.pid}/environ`, 'utf8')).split('\0')).toContain(`HOME=${home}`);
    const info = await stat(home);
    expect({ uid: info.uid, gid: info.gid, mode: info.mode & 0o777 }).toEqual({ uid: a.uid, gid: range.first, mode: 0o700 });
    expect((await stat(stateDir)).mode & 0o777).toBe(0o710);
    await writeFile(join(home, 'left-behind'), 'a secret of asg_a');

    await on.stop(a);
    const c = await start(on, 'asg_c');
    expect(c.uid).toBe(a.uid);
    await expect(readFile(join(home, 'left-behind'), 'utf8')).rejects.toThrow(/ENOENT/);
  });

  it('keeps the uid of a runtime it adopts after a restart, and of any live process, from the next launch; refuses one when none is free', async () => {
    const a = await start(adapter(), 'asg_a');
    const restarted = adapter();
    expect(await restarted.inspect(sleeper('asg_a'))).toMatchObject({ handle: { pid: a.pid, uid: range.first } });
    // A process that runs as the next uid, whoever started it.
    const stranger = spawn('/usr/bin/sleep', ['60'], { uid: range.first + 1, gid: range.first, stdio: 'ignore' });
    strangers.push(stranger);
    await new Promise((resolve) => stranger.once('spawn', resolve));
    const b = await start(restarted, 'asg_b');
    expect(b.uid).toBe(range.first + 2);
    await start(restarted, 'asg_c');
    await expect(restarted.start(sleeper('asg_d'))).rejects.toThrow(
      `no free uid: every uid of the local policy's runAs range ${range.first}-${range.first + 3} is held by a runtime`,
    );
  });

  it('empties a home it may not enter, as the systemd unit runs it (root without CAP_DAC_OVERRIDE)', async () => {
    const homes = join(stateDir, 'homes');
    const home = join(homes, String(range.first));
    // What a runtime may leave: folders of its own, one it closed even to itself, a link out.
    await mkdir(join(home, 'a', 'b'), { recursive: true });
    await writeFile(join(home, 'a', 'b', 'secret'), 'x');
    const outside = join(stateDir, 'outside');
    await writeFile(outside, 'not the runtime’s');
    await symlink(outside, join(home, 'link'));
    execFileSync('chown', ['-R', '-h', `${range.first}:${range.first}`, home]);
    await chmod(join(home, 'a', 'b'), 0o000);
    await chmod(home, 0o700);
    const withoutDacOverride = (code: string) =>
      spawnSync('setpriv', ['--bounding-set=-dac_override,-dac_read_search', process.execPath, '--import', 'tsx', '--input-type=module', '-e', code], {
        encoding: 'utf8',
        timeout: 60_000,
      });
    expect(withoutDacOverride(`await (await import('node:fs/promises')).rm(${JSON.stringify(home)}, { recursive: true, force: true });`).stderr).toMatch(
      /EACCES/,
    );
    const uids = pathToFileURL(resolve('agent/runtimes/uids.ts')).href;
    const fresh = withoutDacOverride(`await (await import(${JSON.stringify(uids)})).freshHome(${JSON.stringify(homes)}, ${range.first}, ${range.first});`);
    expect(fresh.stderr).toBe('');
    expect(await readdir(home)).toEqual([]);
    const info = await stat(home);
    expect({ uid: info.uid, gid: info.gid, mode: info.mode & 0o777 }).toEqual({ uid: range.first, gid: range.first, mode: 0o700 });
    expect(await readFile(outside, 'utf8')).toBe('not the runtime’s');
  });

  it('stops, rather than adopts, a runtime left running as a user the range does not hold', async () => {
    const nobody = (await runtimeUsers(AgentPolicy.parse({ runAs: { user: 'nobody' } }), true))!;
    const shared = await start(adapter(nobody), 'asg_a');
    expect(await adapter().inspect(sleeper('asg_a'))).toBeNull();
    expect(logged).toContain('stopping a runtime that cannot be adopted');
    expect(pidAlive(shared.pid)).toBe(false);
  });
});
