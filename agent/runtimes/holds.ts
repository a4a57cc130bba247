import type { RuntimeUser, RuntimeUsers } from '../runtime-user.js';
import { homesDir } from '../state.js';
import { allocateGpus } from './launch.js';
import { groupAlive } from './process-group.js';
import { freshHome, lowestFreeUid, uidsInUse } from './uids.js';

/**
 * What the machine's processes hold, runtimes and run workers alike, by holder (a runtime's assignment id, a
 * worker's `worker:<id>`): GPU indices and uids of the policy's range. One ledger for both, so that a worker never
 * gets a GPU or a uid a runtime holds, nor the other way round.
 */
export class MachineHolds {
  private readonly gpus = new Map<string, number[]>();
  /** A uid is held while its launch goes on (pid null) or its process group lives, even before it switched to it. */
  private readonly uids = new Map<string, { uid: number; pid: number | null }>();

  constructor(
    private readonly stateDir: string,
    /** The machine's GPU indices; none by default. */
    private readonly machineGpus?: () => Promise<number[]>,
  ) {}

  /** `count` GPUs for `holder`, reserved at once (two launches in parallel never get the same ones). */
  async reserveGpus(holder: string, count: number): Promise<number[]> {
    if (count === 0) return [];
    const available = this.machineGpus ? await this.machineGpus() : [];
    const held = new Set([...this.gpus].filter(([id]) => id !== holder).flatMap(([, indices]) => indices));
    const indices = allocateGpus(available, held, count);
    if (!indices) throw new Error(`needs ${count} GPUs; ${available.filter((index) => !held.has(index)).length} of ${available.length} are free`);
    this.gpus.set(holder, indices);
    return indices;
  }

  /** Takes over what an adopted process holds. */
  adopt(holder: string, held: { gpuIndices: number[]; uid: number | null; pid: number }): void {
    this.gpus.set(holder, held.gpuIndices);
    if (held.uid !== null) this.uids.set(holder, { uid: held.uid, pid: held.pid });
  }

  /**
   * Who `holder`'s launch runs as: the one user, or the lowest uid of the range that nothing else holds and no live
   * process runs as, reserved at once, with a new home.
   */
  async runAs(holder: string, users: RuntimeUsers): Promise<RuntimeUser> {
    if (users.kind === 'one') return users.user;
    const used = await uidsInUse();
    const held = new Set([...this.uids].filter(([id, hold]) => id !== holder && (hold.pid === null || groupAlive(hold.pid))).map(([, hold]) => hold.uid));
    const uid = lowestFreeUid(users.uids, held, used);
    const { first, count } = users.uids;
    if (uid === null) throw new Error(`no free uid: every uid of the local policy's runAs range ${first}-${first + count - 1} is held by a runtime or worker`);
    this.uids.set(holder, { uid, pid: null });
    try {
      return { name: `uid ${uid}`, home: await freshHome(homesDir(this.stateDir), uid, users.gid), ids: { uid, gid: users.gid } };
    } catch (error) {
      this.uids.delete(holder);
      throw error;
    }
  }

  /** The launch's process started: its uid is held while its group lives. */
  started(holder: string, pid: number): void {
    const hold = this.uids.get(holder);
    if (hold) hold.pid = pid;
  }

  releaseGpus(holder: string): void {
    this.gpus.delete(holder);
  }

  releaseUid(holder: string): void {
    this.uids.delete(holder);
  }

  release(holder: string): void {
    this.releaseGpus(holder);
    this.releaseUid(holder);
  }
}
