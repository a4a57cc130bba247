import { mkdir, readdir, readFile, rm, stat as fileStat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { writeFileAtomic } from '../state.js';

/** What the agent keeps of a worker it started, to find it again after a restart. */
export const WorkerRecord = z.object({
  workerId: z.string(),
  attempt: z.number().int().nonnegative(),
  pid: z.number().int().positive(),
  /** The uid of the range it runs as; null when it runs as the agent or the policy's one user. */
  uid: z.number().int().nonnegative().nullable(),
  gpuIndices: z.array(z.number().int().nonnegative()),
  startedAt: z.string(),
  /** The kernel's start time of its process (/proc/<pid>/stat, clock ticks since boot): a reused pid has another. */
  startTicks: z.number().int().nonnegative(),
});
export type WorkerRecord = z.infer<typeof WorkerRecord>;

/** Where workers' records and logs live: `<state dir>/workers/`, private to the agent like `runtimes/`. */
export const workersDir = (stateDir: string) => join(stateDir, 'workers');

// Encoded, so that no worker id names a file outside the workers dir.
const recordPath = (stateDir: string, workerId: string) => join(workersDir(stateDir), `${encodeURIComponent(workerId)}.json`);
export const workerLogPath = (stateDir: string, workerId: string) => join(workersDir(stateDir), `${encodeURIComponent(workerId)}.log`);

export async function saveWorkerRecord(stateDir: string, record: WorkerRecord): Promise<void> {
  await mkdir(workersDir(stateDir), { recursive: true, mode: 0o700 });
  await writeFileAtomic(recordPath(stateDir, record.workerId), JSON.stringify(record));
}

export async function removeWorkerRecord(stateDir: string, workerId: string): Promise<void> {
  await rm(recordPath(stateDir, workerId), { force: true });
}

/** The names in the workers' folder; none before the first worker made it. */
async function workerFiles(stateDir: string): Promise<string[]> {
  try {
    return await readdir(workersDir(stateDir));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

/** Every record an earlier agent left; one that does not parse is removed (only another version could write it). */
export async function loadWorkerRecords(stateDir: string, log: (event: string, fields?: Record<string, unknown>) => void): Promise<WorkerRecord[]> {
  const names = await workerFiles(stateDir);
  const records: WorkerRecord[] = [];
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    const path = join(workersDir(stateDir), name);
    let json: unknown = null;
    try {
      json = JSON.parse(await readFile(path, 'utf8'));
    } catch {
      // Refused by the schema below.
    }
    const parsed = WorkerRecord.safeParse(json);
    if (parsed.success) records.push(parsed.data);
    else {
      log('worker record unreadable', { file: name });
      await rm(path, { force: true });
    }
  }
  return records;
}

/**
 * The ids of the workers whose log an earlier agent left without a record (finished workers' logs it kept, and
 * those of workers that ended by themselves), oldest first by last write.
 */
export async function loadWorkerLogIds(stateDir: string): Promise<string[]> {
  const names = await workerFiles(stateDir);
  const logs: Array<{ workerId: string; at: number }> = [];
  for (const name of names.filter((n) => n.endsWith('.log') && !names.includes(`${n.slice(0, -'.log'.length)}.json`))) {
    const at = await fileStat(join(workersDir(stateDir), name)).then(
      (s) => s.mtimeMs,
      () => null,
    );
    if (at !== null) logs.push({ workerId: decodeURIComponent(name.slice(0, -'.log'.length)), at });
  }
  return logs.sort((a, b) => a.at - b.at).map((l) => l.workerId);
}

/** The kernel's start time of `pid` in clock ticks since boot, or null when it does not exist (or is a zombie). */
export async function processStartTicks(pid: number): Promise<number | null> {
  let stat: string;
  try {
    stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The fields after the parenthesised command name (which may hold spaces): state is the 3rd field, starttime the 22nd.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z') return null;
  const ticks = Number(fields[19]);
  return Number.isInteger(ticks) ? ticks : null;
}
