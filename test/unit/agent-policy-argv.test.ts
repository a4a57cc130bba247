import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentPolicy, argvDigest, policyRefusal } from '../../agent/policy.js';
import { LaunchRefused } from '../../agent/runtimes/adapter.js';
import { ProcessAdapter } from '../../agent/runtimes/process.js';
import type { Assignment, TemplateRuntime } from '../../shared/contracts/desired.js';

const PYTHON_SHA = 'a83c0370d91532c96d4060a0e7c107d1f2889dad8a98e03395e86ef0373fd467';
/** The argv the node owner reviewed: the server script, nothing else. */
const SERVER_ARGS = ['./rt/server.py', '--port', '{port}', '--name', 'x'];
/** What the review's admin re-registered the allowed template with: `-c <code>` runs anything. */
const PWN_ARGS = ['-c', 'import os; open("/tmp/lnx-sec-pwned-by-admin","w").write("pwned")', '--port', '{port}', '--name', 'x'];

const pyrt = (args: string[]): TemplateRuntime => ({
  kind: 'template',
  template: 'pyrt',
  executable: '/usr/bin/python3.11',
  executableSha256: PYTHON_SHA,
  args,
  env: {},
  healthPath: '/health',
});

const assignment = (runtime: Assignment['runtime']): Assignment => ({
  assignmentId: 'asg_argv',
  deploymentId: 'dep_1',
  deploymentName: 'pyrt-dep',
  model: 'pyrt-model',
  deploymentGeneration: 1,
  runtime,
  artifact: null,
  restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
  resources: { gpus: 0, memoryMiB: 1024 },
  startup: { timeoutMs: 60_000, probeIntervalMs: 500, failureThreshold: 3 },
  templateHash: 'h',
});

const policy = (pin: Record<string, unknown>) =>
  AgentPolicy.parse({ templates: { pyrt: { executable: '/usr/bin/python3.11', executableSha256: PYTHON_SHA, env: ['MODEL_NAME'], ...pin } } });

/** The digest the policy's `argvSha256` holds: SHA-256 of the argv as JSON, computed here independently. */
const digestOf = (args: string[]) => createHash('sha256').update(JSON.stringify(args), 'utf8').digest('hex');

/**
 * Second security review, M2: the node's local policy pinned a template's name, executable and env names, not its
 * argv, so an admin re-registering an allowed interpreter template with `-c <code>` ran that code on the node. The
 * policy can now pin each template's argv, exactly (`args`) or by digest (`argvSha256`), checked at every launch
 * and adoption; and the executable's digest has one name in the template and the policy (`executableSha256`).
 */
describe('the local policy pins a template argv (security review 2, M2)', () => {
  it('an exact `args` pin refuses any other argv, the reviewed one runs', () => {
    const pinned = policy({ args: SERVER_ARGS });
    expect(policyRefusal(pinned, assignment(pyrt(SERVER_ARGS)))).toBeNull();
    expect(policyRefusal(pinned, assignment(pyrt(PWN_ARGS)))).toBe(
      `template "pyrt" runs arguments the local policy does not pin (argv digest ${digestOf(PWN_ARGS)})`,
    );
    // One argument more, fewer, or another param value: refused too.
    expect(policyRefusal(pinned, assignment(pyrt([...SERVER_ARGS, '--debug'])))).toMatch(/does not pin/);
    expect(policyRefusal(pinned, assignment(pyrt(SERVER_ARGS.slice(0, -1))))).toMatch(/does not pin/);
    expect(policyRefusal(pinned, assignment(pyrt(['./rt/server.py', '--port', '{port}', '--name', 'y'])))).toMatch(/does not pin/);
  });

  it('an `argvSha256` pin accepts any of the digests listed, and the refusal names the digest to pin', () => {
    const other = ['./rt/server.py', '--port', '{port}', '--name', 'y'];
    const pinned = policy({ argvSha256: [digestOf(SERVER_ARGS), digestOf(other)] });
    expect(argvDigest(SERVER_ARGS)).toBe(digestOf(SERVER_ARGS));
    expect(policyRefusal(pinned, assignment(pyrt(SERVER_ARGS)))).toBeNull();
    expect(policyRefusal(pinned, assignment(pyrt(other)))).toBeNull();
    expect(policyRefusal(pinned, assignment(pyrt(PWN_ARGS)))).toContain(digestOf(PWN_ARGS));
  });

  it("without a pin the argv is the control plane admin's (what the docs warn about for interpreters)", () => {
    expect(policyRefusal(policy({}), assignment(pyrt(PWN_ARGS)))).toBeNull();
  });

  it('pins are validated: digests as 64 lowercase hex digits, args as plain strings', () => {
    for (const pin of [{ argvSha256: ['abc'] }, { argvSha256: [] }, { argvSha256: PYTHON_SHA }, { args: 'x' }, { args: ['a\u0000b'] }]) {
      expect(AgentPolicy.safeParse({ templates: { pyrt: { executable: '/usr/bin/python3.11', ...pin } } }).success, JSON.stringify(pin)).toBe(false);
    }
  });

  it('the executable digest is `executableSha256` in the policy as in the template; `sha256` stays an alias, and both must agree', () => {
    const other = 'b'.repeat(64);
    expect(policyRefusal(policy({}), assignment(pyrt(SERVER_ARGS)))).toBeNull();
    expect(policyRefusal(policy({ executableSha256: other }), assignment(pyrt(SERVER_ARGS)))).toMatch(/pins executable digest/);
    const legacy = AgentPolicy.parse({ templates: { pyrt: { executable: '/usr/bin/python3.11', sha256: other } } });
    expect(policyRefusal(legacy, assignment(pyrt(SERVER_ARGS)))).toMatch(/pins executable digest/);
    expect(AgentPolicy.safeParse({ templates: { pyrt: { executable: '/x', sha256: PYTHON_SHA, executableSha256: other } } }).success).toBe(false);
    expect(AgentPolicy.safeParse({ templates: { pyrt: { executable: '/x', sha256: PYTHON_SHA, executableSha256: PYTHON_SHA } } }).success).toBe(true);
  });

  describe('checked at launch and at adoption', () => {
    let stateDir: string;
    let adapter: ProcessAdapter;
    beforeAll(async () => {
      stateDir = await mkdtemp(join(tmpdir(), 'lnx-argv-'));
      adapter = new ProcessAdapter({
        stateDir,
        policy: policy({ args: SERVER_ARGS }),
        users: { kind: 'one', user: { name: 'self', home: stateDir, ids: null } },
        launchSpec: () => {
          throw new Error('never launched');
        },
        log: () => {},
      });
    });
    afterAll(async () => {
      await rm(stateDir, { recursive: true, force: true });
    });

    it('a re-registered argv is refused before anything is prepared or adopted', async () => {
      const pwn = assignment(pyrt(PWN_ARGS));
      await expect(adapter.prepare(pwn, new AbortController().signal)).rejects.toThrow(LaunchRefused);
      await expect(adapter.prepare(pwn, new AbortController().signal)).rejects.toThrow(/refused by local policy: template "pyrt" runs arguments/);
      await expect(adapter.inspect(pwn)).rejects.toThrow(/refused by local policy: template "pyrt" runs arguments/);
      await expect(adapter.inspect(assignment(pyrt(SERVER_ARGS)))).resolves.toBeNull();
    });
  });
});
