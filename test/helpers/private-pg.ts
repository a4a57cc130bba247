import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../agent/runtimes/process.js';

const run = promisify(execFile);

/** A PostgreSQL cluster of its own, in a temp dir: one a test may stop and start without disturbing anyone. */
export interface PrivateCluster {
  /** Its `postgres` database, as role `lunanexa` (trust authentication, loopback only). */
  url: string;
  port: number;
  /** Stops it (`pg_ctl stop -m fast`): connections are cut and new ones refused until `start`. */
  stop(): Promise<void>;
  /** Starts it again on the same port, with the same data. */
  start(): Promise<void>;
  /** Stops it if it runs and removes its directory. */
  destroy(): Promise<void>;
}

/** The newest Debian PostgreSQL with the server binaries (`postgresql` package), or null. */
function binDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')) && existsSync(join(root, v, 'bin', 'pg_ctl')))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(root, versions[0]!, 'bin') : null;
}

/** PostgreSQL refuses to run as root: as root the cluster belongs to `postgres`, run through `runuser`. */
function rootRunner(): { uid: number; gid: number } | null {
  try {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    execFileSync('runuser', ['--help'], { stdio: 'ignore' });
    return { uid, gid };
  } catch {
    return null;
  }
}

/**
 * Why no private cluster can be made on this machine, or null when one can: for `it.skipIf`, so that a suite
 * that needs one says it was skipped rather than passing without it.
 */
export function privateClusterUnavailable(): string | null {
  if (!binDir()) return 'no PostgreSQL server binaries under /usr/lib/postgresql (the postgresql package)';
  if (process.getuid?.() === 0 && !rootRunner()) return 'running as root without a postgres user and runuser to run PostgreSQL as';
  return null;
}

/** Creates a cluster in a temp dir (initdb), starts it on a free loopback port, and answers how to reach and control it. */
export async function startPrivateCluster(): Promise<PrivateCluster> {
  const unavailable = privateClusterUnavailable();
  if (unavailable) throw new Error(`cannot start a private PostgreSQL cluster: ${unavailable}`);
  const bin = binDir()!;
  const owner = process.getuid?.() === 0 ? rootRunner() : null;
  const dir = await mkdtemp(join(tmpdir(), 'lnx-pg-'));
  if (owner) await chown(dir, owner.uid, owner.gid);
  const data = join(dir, 'data');
  const log = join(dir, 'postgres.log');
  const port = await freePort();
  const exec = async (tool: string, args: string[]) => {
    const [file, argv] = owner ? ['runuser', ['-u', 'postgres', '--', join(bin, tool), ...args]] : [join(bin, tool), args];
    // Its own dir as working directory: the postgres user may not be allowed into the caller's.
    await run(file, argv, { cwd: dir, timeout: 120_000 });
  };
  const withLog = async (what: string, step: () => Promise<void>) => {
    try {
      await step();
    } catch (error) {
      const tail = (await readFile(log, 'utf8').catch(() => '')).split('\n').slice(-20).join('\n');
      throw new Error(`${what} failed: ${error instanceof Error ? error.message : String(error)}\n${tail}`);
    }
  };
  let running = false;
  const start = () =>
    withLog('starting the private cluster', async () => {
      // Unix socket in its own dir too; durability is not what these tests are about.
      await exec('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '60', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, 'start']);
      running = true;
    });
  const stop = () =>
    withLog('stopping the private cluster', async () => {
      await exec('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '60', 'stop']);
      running = false;
    });
  try {
    await withLog('initdb', () => exec('initdb', ['-D', data, '-U', 'lunanexa', '--auth=trust', '-E', 'UTF8', '--no-sync', '--no-instructions']));
    await start();
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `postgres://lunanexa@127.0.0.1:${port}/postgres`,
    port,
    stop,
    start,
    async destroy() {
      if (running) await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', '-t', '60', 'stop']).catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
}
