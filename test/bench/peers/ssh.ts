import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../../agent/runtimes/process.js';
import { waitFor } from '../../helpers/plane.js';
import { withDescendants } from '../proc-cpu.js';
import { spawnLogged } from '../spawned.js';
import type { Peer } from './nginx.js';

const SSHD = '/usr/sbin/sshd';
const SSH = '/usr/bin/ssh';
const KEYGEN = '/usr/bin/ssh-keygen';

/** Why the `ssh -R` path cannot run here, or null when it can. */
export function sshMissing(): string | null {
  const missing = [SSHD, SSH, KEYGEN].filter((p) => !existsSync(p));
  return missing.length === 0 ? null : `${missing.join(', ')} missing (apt-get install -y openssh-server)`;
}

/**
 * The classic way to reach a machine behind a firewall: the node runs `ssh -N -R` to a public sshd, and clients
 * reach its runtime through the port sshd listens on. Here a private sshd on loopback with its own config, host
 * key, client key and pid file under `root`; nothing of the system's ssh configuration is read.
 */
export async function startSshTunnel(root: string, runtimePorts: number[]): Promise<Peer> {
  const dir = join(root, 'ssh');
  await mkdir(dir, { recursive: true, mode: 0o700 });
  for (const key of ['host_key', 'client_key']) execFileSync(KEYGEN, ['-q', '-t', 'ed25519', '-N', '', '-C', 'lunanexa-bench', '-f', join(dir, key)]);
  await writeFile(join(dir, 'authorized_keys'), await readFile(join(dir, 'client_key.pub')));
  const asRoot = process.getuid?.() === 0;
  // sshd running as root insists on its privilege-separation directory, a path compiled into Debian's build
  // (the package's service unit creates it at boot).
  if (asRoot) await mkdir('/run/sshd', { recursive: true, mode: 0o755 });
  const sshPort = await freePort();
  await writeFile(
    join(dir, 'sshd_config'),
    [
      'ListenAddress 127.0.0.1',
      `Port ${sshPort}`,
      `HostKey ${join(dir, 'host_key')}`,
      `PidFile ${join(dir, 'sshd.pid')}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      'AuthenticationMethods publickey',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      // No PAM: the system's PAM stack is system configuration, and a key is all this login needs.
      'UsePAM no',
      // The keys live in a temp dir whose owner and modes sshd would otherwise check against the login user.
      'StrictModes no',
      `PermitRootLogin ${asRoot ? 'prohibit-password' : 'no'}`,
      'AllowTcpForwarding remote',
      'GatewayPorts no',
      'X11Forwarding no',
      'PermitTTY no',
      'LogLevel ERROR',
      '',
    ].join('\n'),
  );
  const sshd = spawnLogged(SSHD, ['-D', '-e', '-f', join(dir, 'sshd_config')], {}, join(dir, 'sshd.log'));
  const hostKey = (await readFile(join(dir, 'host_key.pub'), 'utf8')).trim();
  await writeFile(join(dir, 'known_hosts'), `[127.0.0.1]:${sshPort} ${hostKey}\n`);

  const urls = new Map<number, string>();
  const forwards: string[] = [];
  for (const port of runtimePorts) {
    const listen = await freePort();
    urls.set(port, `http://127.0.0.1:${listen}`);
    forwards.push('-R', `127.0.0.1:${listen}:127.0.0.1:${port}`);
  }
  const options = [
    'BatchMode=yes',
    'IdentitiesOnly=yes',
    'StrictHostKeyChecking=yes',
    `UserKnownHostsFile=${join(dir, 'known_hosts')}`,
    'ExitOnForwardFailure=yes',
    'ServerAliveInterval=15',
  ];
  const connect = () =>
    spawnLogged(
      SSH,
      [
        '-N',
        '-F',
        '/dev/null',
        '-i',
        join(dir, 'client_key'),
        '-p',
        String(sshPort),
        ...options.flatMap((o) => ['-o', o]),
        ...forwards,
        `${userInfo().username}@127.0.0.1`,
      ],
      {},
      join(dir, 'ssh.log'),
    );
  // sshd may not listen yet when the first client starts; ssh then exits and is started again.
  let ssh = connect();
  for (const url of urls.values()) {
    await waitFor(
      async () => {
        if (ssh.exitCode !== null) ssh = connect();
        return (await fetch(`${url}/health`)).ok;
      },
      { timeoutMs: 20_000, intervalMs: 250, what: `ssh -R tunnel (logs in ${dir})` },
    );
  }
  return {
    urls,
    processes: [
      { name: 'sshd', pids: () => withDescendants(sshd.pid!) },
      { name: 'ssh', pids: () => [ssh.pid!] },
    ],
  };
}
