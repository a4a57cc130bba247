import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../agent/runtimes/process.js';

const run = promisify(execFile);

/** A Slurm cluster of its own: one node (this machine), one partition, its own munge, ports and state, all in a temp dir. */
export interface SlurmCluster {
  /** The environment Slurm's client commands need to reach it (SLURM_CONF, PATH): never the machine's own Slurm. */
  env: Record<string, string>;
  conf: string;
  /** Its one partition (the default) and node. */
  partition: string;
  node: string;
  dir: string;
  /** Stops slurmctld (SIGTERM: it saves its state) and starts it again on the same state, as a site's restart does. */
  stopController(): Promise<void>;
  startController(): Promise<void>;
  /** Cancels its jobs, stops its daemons (munged too) and removes its directory. */
  stop(): Promise<void>;
}

const TOOLS = ['munged', 'slurmctld', 'slurmd', 'sbatch', 'scontrol', 'scancel', 'sinfo', 'squeue'];

function which(tool: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/sbin', '/sbin'])) {
    if (dir && existsSync(join(dir, tool))) return join(dir, tool);
  }
  return null;
}

/**
 * Why no Slurm can be started on this machine, or null when one can: for `describe.skipIf`, with the reason in the
 * suite's name. `.ci/run` installs Debian's slurm-wlm and munge, and runs as root.
 */
export function slurmUnavailable(): string | null {
  const missing = TOOLS.filter((tool) => !which(tool));
  if (missing.length) return `no ${missing.join(', ')} (apt-get install slurm-wlm munge)`;
  // slurmd starts each job as its user: only root may.
  if (process.getuid?.() !== 0) return 'not root: slurmd must run as root to start jobs';
  return null;
}

/**
 * Starts a single-node Slurm (Debian's 22.05): munged with its own key and socket, slurmctld and slurmd in the
 * foreground as this process's children, on free ports, with no cgroups (proctrack/linuxproc, task/none) and no
 * accounting. Resolves once the node is idle (about 1.7 s on the 2-core development machine).
 */
export async function startSlurm(options: { minJobAgeS?: number } = {}): Promise<SlurmCluster> {
  const unavailable = slurmUnavailable();
  if (unavailable) throw new Error(`cannot start Slurm: ${unavailable}`);
  const dir = await mkdtemp(join(tmpdir(), 'lnx-slurm-'));
  // munged wants every directory above its socket searchable by all, and its key readable by it alone.
  await chmod(dir, 0o755);
  const children: { name: string; child: ChildProcess }[] = [];
  const conf = join(dir, 'slurm.conf');
  const env = { SLURM_CONF: conf, PATH: process.env.PATH ?? '/usr/bin:/bin' };
  const daemon = (name: string, args: string[]) => {
    const out = openSync(join(dir, `${name}.out`), 'a');
    const child = spawn(which(name)!, args, { cwd: dir, env: { PATH: env.PATH }, stdio: ['ignore', out, out] });
    closeSync(out);
    child.on('error', () => {});
    children.push({ name, child });
    return child;
  };
  const logs = async () => {
    const tails = await Promise.all(
      children.map(async ({ name }) => `--- ${name}\n${(await readFile(join(dir, `${name}.out`), 'utf8').catch(() => '')).split('\n').slice(-15).join('\n')}`),
    );
    return tails.join('\n');
  };
  const stopDaemon = async (entry: { name: string; child: ChildProcess }) => {
    const { child } = entry;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const killed = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(killed);
    }
    children.splice(children.indexOf(entry), 1);
  };
  const until = async (what: string, ok: () => Promise<boolean>, ms = 20_000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      if (await ok().catch(() => false)) return;
      const dead = children.find(({ child }) => child.exitCode !== null || child.signalCode !== null);
      if (dead) throw new Error(`${dead.name} exited (${dead.child.exitCode ?? dead.child.signalCode}) before ${what}\n${await logs()}`);
      if (Date.now() > deadline) throw new Error(`no ${what} after ${ms} ms\n${await logs()}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const sinfo = async () => (await run('sinfo', ['-h', '-N', '-o', '%T'], { env, timeout: 10_000 })).stdout.trim();
  const startController = async () => {
    daemon('slurmctld', ['-D', '-f', conf]);
    await until('slurmctld answering', async () => (await sinfo()) !== '');
  };

  try {
    const socket = join(dir, 'munge.socket');
    const key = join(dir, 'munge.key');
    await writeFile(key, randomBytes(1024), { mode: 0o400 });
    daemon('munged', [
      '-F',
      `--socket=${socket}`,
      `--key-file=${key}`,
      `--log-file=${join(dir, 'munged.log')}`,
      `--pid-file=${join(dir, 'munged.pid')}`,
      `--seed-file=${join(dir, 'munged.seed')}`,
    ]);
    await until('munge socket', async () => existsSync(socket));

    // This machine as `slurmd -C` describes it (CPUs, sockets, cores, threads, RealMemory): a node that claims more
    // than it has is drained.
    const hardware = execFileSync(which('slurmd')!, ['-C'], { encoding: 'utf8' }).split('\n')[0]!.trim();
    const node = /^NodeName=(\S+)/.exec(hardware)?.[1];
    if (!node) throw new Error(`slurmd -C printed no NodeName: ${hardware}`);
    const [ctldPort, slurmdPort] = [await freePort(), await freePort()];
    const partition = 'lunanexa';
    await Promise.all(['state', 'spool', 'logs'].map((sub) => mkdir(join(dir, sub), { mode: 0o700 })));
    await writeFile(
      conf,
      [
        'ClusterName=lunanexa',
        `SlurmctldHost=${node}(127.0.0.1)`,
        'SlurmUser=root',
        'SlurmdUser=root',
        `SlurmctldPort=${ctldPort}`,
        `SlurmdPort=${slurmdPort}`,
        'AuthType=auth/munge',
        'CredType=cred/munge',
        `AuthInfo=socket=${socket}`,
        `StateSaveLocation=${join(dir, 'state')}`,
        `SlurmdSpoolDir=${join(dir, 'spool')}`,
        `SlurmctldPidFile=${join(dir, 'slurmctld.pid')}`,
        `SlurmdPidFile=${join(dir, 'slurmd.pid')}`,
        `SlurmctldLogFile=${join(dir, 'logs', 'slurmctld.log')}`,
        `SlurmdLogFile=${join(dir, 'logs', 'slurmd.log')}`,
        // No cgroups: in a container proctrack/cgroup fails each job ("cgroup namespace 'freezer' not mounted",
        // measured here); the linuxproc tracker follows a job's processes by parentage, and no task plugin binds them.
        'ProctrackType=proctrack/linuxproc',
        'TaskPlugin=task/none',
        'JobAcctGatherType=jobacct_gather/none',
        'AccountingStorageType=accounting_storage/none',
        'JobCompType=jobcomp/none',
        'MpiDefault=none',
        'SelectType=select/cons_tres',
        'SelectTypeParameters=CR_Core_Memory',
        // A job that asks for no memory must not take the whole node.
        'DefMemPerCPU=256',
        'ReturnToService=2',
        // How long a finished job stays known to scontrol, with its exit code (no accounting keeps it after).
        `MinJobAge=${options.minJobAgeS ?? 300}`,
        // A cancelled job's SIGKILL follows its SIGTERM after 2 s, not 30: the suite ends sooner.
        'KillWait=2',
        // A controller that is down is known in 2 s rather than after 10 s and retries (the restart tests wait on it).
        'MessageTimeout=2',
        // A job is scheduled as it is submitted, not up to 3 s later.
        'SchedulerParameters=batch_sched_delay=0',
        `${hardware} NodeAddr=127.0.0.1 State=UNKNOWN`,
        `PartitionName=${partition} Nodes=${node} Default=YES MaxTime=INFINITE State=UP`,
        '',
      ].join('\n'),
    );
    await startController();
    daemon('slurmd', ['-D', '-f', conf]);
    await until('idle node', async () => (await sinfo()) === 'idle');

    return {
      env,
      conf,
      partition,
      node,
      dir,
      async stopController() {
        const ctld = children.find(({ name }) => name === 'slurmctld');
        if (ctld) await stopDaemon(ctld);
      },
      startController,
      async stop() {
        // Its jobs first, so that no job step outlives its slurmd.
        if (children.some(({ name }) => name === 'slurmctld')) {
          await run('scancel', ['--full', `--user=${process.getuid?.() ?? 0}`], { env, timeout: 10_000 }).catch(() => {});
          await until('empty queue', async () => (await run('squeue', ['-h', '-o', '%i'], { env, timeout: 10_000 })).stdout.trim() === '', 10_000).catch(
            () => {},
          );
        }
        for (const name of ['slurmd', 'slurmctld', 'munged']) {
          const entry = children.find((c) => c.name === name);
          if (entry) await stopDaemon(entry);
        }
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    for (const entry of [...children].reverse()) await stopDaemon(entry);
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}
