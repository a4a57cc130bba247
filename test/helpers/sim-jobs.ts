import { readdir, readFile } from 'node:fs/promises';
import { SIM_JOB_EXECUTABLE } from '../../functions/hosts/dev/fleet.js';

/** The pids of live sim jobs (their command line names the script; zombies not counted), as `pgrep -f sim-job` finds them. */
export async function simJobs(): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const state = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (cmdline.includes(SIM_JOB_EXECUTABLE) && !/\) Z /.test(state)) found.push(Number(entry));
  }
  return found;
}
