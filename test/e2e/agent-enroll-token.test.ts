import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { loadIdentity } from '../../agent/state.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/** `lunanexa-agent enroll` takes its token from a file, standard input or the environment (docs/design.md section 10). */
describe('enrollment token sources', () => {
  let plane: TestPlane;
  let dir: string;
  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    dir = await mkdtemp(join(tmpdir(), 'lnx-enroll-'));
  });
  afterAll(async () => {
    await plane?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const token = async (name: string) =>
    (await createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name, labels: {}, ttlSeconds: 300 } })).token;
  /** Runs the agent's enroll with `args`, writing `stdin` to it; resolves with its exit code and stderr. */
  const enroll = (name: string, args: string[], opts: { stdin?: string; env?: NodeJS.ProcessEnv } = {}) =>
    new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const env = { ...process.env, ...opts.env };
      if (!opts.env?.LUNANEXA_ENROLLMENT_TOKEN) delete env.LUNANEXA_ENROLLMENT_TOKEN;
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'agent/main.ts', 'enroll', '--url', plane.url, '--name', name, '--state-dir', join(dir, name), ...args],
        { env },
      );
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stderr }));
      child.stdin.end(opts.stdin ?? '');
    });

  it('reads it from a file', async () => {
    const file = join(dir, 'token');
    await writeFile(file, `${await token('from-file')}\n`, { mode: 0o600 });
    const result = await enroll('from-file', ['--token-file', file]);
    expect(result.code, result.stderr).toBe(0);
    expect((await loadIdentity(join(dir, 'from-file')))?.name).toBe('from-file');
  });

  it('reads it from standard input with --token -', async () => {
    const result = await enroll('from-stdin', ['--token', '-'], { stdin: `${await token('from-stdin')}\n` });
    expect(result.code, result.stderr).toBe(0);
    expect((await loadIdentity(join(dir, 'from-stdin')))?.name).toBe('from-stdin');
  });

  it('reads it from LUNANEXA_ENROLLMENT_TOKEN with --token -', async () => {
    const result = await enroll('from-env', ['--token', '-'], { env: { LUNANEXA_ENROLLMENT_TOKEN: await token('from-env') } });
    expect(result.code, result.stderr).toBe(0);
    expect((await loadIdentity(join(dir, 'from-env')))?.name).toBe('from-env');
  });

  it('declares no labels of its own: no --label option, no labels in the body', async () => {
    const refused = await enroll('labelled', ['--token', '-', '--label', 'gpu=h100'], { stdin: 'lnxe_unused' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("unknown option '--label'");
    // What the agent posts, as a stand-in control plane sees it.
    const bodies: unknown[] = [];
    const capture = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        bodies.push(JSON.parse(body));
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { code: 'invalid_enrollment_token', message: 'no', requestId: 'r' } }));
      });
    });
    await new Promise<void>((resolve) => capture.listen(0, '127.0.0.1', resolve));
    try {
      const address = capture.address() as AddressInfo;
      const result = await new Promise<number | null>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          [
            '--import',
            'tsx',
            'agent/main.ts',
            'enroll',
            '--url',
            `http://127.0.0.1:${address.port}`,
            '--name',
            'captured',
            '--state-dir',
            join(dir, 'captured'),
            '--token',
            '-',
          ],
          {
            env: { ...process.env, LUNANEXA_ENROLLMENT_TOKEN: 'lnxe_captured-token' },
            stdio: 'ignore',
          },
        );
        child.on('error', reject);
        child.on('close', resolve);
      });
      expect(result).toBe(1);
      expect(bodies).toHaveLength(1);
      expect(Object.keys(bodies[0] as object).sort()).toEqual(['inventory', 'name', 'publicKey', 'token']);
    } finally {
      await new Promise((resolve) => capture.close(resolve));
    }
  });

  it('never takes the token on the command line, and keeps it out of the process list while enrolling', async () => {
    const literal = await enroll('literal', ['--token', 'lnxe_visible-to-everyone']);
    expect(literal.code).toBe(1);
    expect(literal.stderr).toContain('not taken on the command line');
    // While an enrollment runs, read every process's argv as any local user could.
    const secret = await token('watched');
    const running = enroll('watched', ['--token', '-'], { stdin: `${secret}\n` });
    let seen = 0;
    let leaked = false;
    for (const started = Date.now(); Date.now() - started < 3_000; await new Promise((r) => setTimeout(r, 20))) {
      for (const pid of (await readdir('/proc')).filter((entry) => /^\d+$/.test(entry))) {
        const argv = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
        if (!argv.includes('watched')) continue;
        seen += 1;
        leaked ||= argv.includes(secret);
      }
    }
    expect((await running).code).toBe(0);
    expect(seen).toBeGreaterThan(0);
    expect(leaked).toBe(false);
  });

  it('refuses both or neither source, and a wrong token, with a clear message', async () => {
    const neither = await enroll('neither', []);
    expect(neither.code).toBe(1);
    expect(neither.stderr).toContain('give exactly one of --token and --token-file');
    const wrong = await enroll('wrong', ['--token', '-'], { stdin: 'enr_not-a-token' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('enrollment failed');
    expect(await loadIdentity(join(dir, 'wrong'))).toBeNull();
  });
});
