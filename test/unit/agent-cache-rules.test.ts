import { describe, expect, it } from 'vitest';
import { sizeText, versionBlobs, versionProblem } from '../../agent/artifacts/layout.js';
import { redactUrl } from '../../agent/artifacts/download.js';
import { AgentPolicy, cacheSettings, policyRefusal } from '../../agent/policy.js';
import { IDLE } from '../../agent/supervisor/plan.js';
import { runtimeReport, type RuntimeFacts } from '../../agent/supervisor/report.js';
import type { VersionArtifact } from '../../shared/contracts/artifacts.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { RuntimeReport } from '../../shared/contracts/heartbeat.js';

const SHA = 'a'.repeat(64);
const version = (paths: string[], extra: Partial<VersionArtifact> = {}): VersionArtifact => ({
  versionId: 'mv_1',
  model: 'm',
  version: 'v1',
  totalBytes: paths.length,
  files: paths.map((path) => ({ path, size: 1, sha256: SHA, url: `https://store.example/${path}?sig=secret` })),
  urlsExpireAt: 2_000_000_000,
  ...extra,
});

describe('versionProblem: a version as the node lays it out', () => {
  it('accepts plain relative paths, nested folders included', () => {
    expect(versionProblem(version(['config.json', 'tokenizer/tokenizer.json', 'a/b/c.bin']))).toBeNull();
  });

  it.each([
    ['../etc/passwd', "a path must not have a '..' segment"],
    ['a/../../x', "a path must not have a '..' segment"],
    ['/etc/passwd', "a path is relative to the version's folder: no leading '/'"],
    ['a\\b', "a path separates its folders with '/', never a backslash"],
    ['./a', "a path must not have a '.' segment"],
    ['a//b', "a path must not have an empty segment ('//' or a trailing '/')"],
    ['a/', "a path must not have an empty segment ('//' or a trailing '/')"],
    ['', 'a path must not be empty'],
    ['a\u0000b', 'a path must not carry control characters'],
  ])('refuses %j', (path, problem) => {
    expect(versionProblem(version(['ok.bin', path]))).toBe(`version mv_1: file ${JSON.stringify(path)}: ${problem}`);
  });

  it('refuses a path named twice, and a path that is a file and a folder at once', () => {
    expect(versionProblem(version(['a.bin', 'a.bin']))).toBe('version mv_1: file a.bin is named twice');
    expect(versionProblem(version(['a', 'a/b']))).toBe('version mv_1: a is a file and the folder of a/b');
    expect(versionProblem(version(['x/y/z', 'x/y']))).toBe('version mv_1: x/y is a file and the folder of x/y/z');
    // A shared prefix that is no folder is fine.
    expect(versionProblem(version(['ab', 'a/b']))).toBeNull();
  });

  it.each(['..', '.', 'a/b', 'mv 1', '', 'x'.repeat(65)])('refuses the version id %j, which names a folder', (versionId) => {
    expect(versionProblem(version(['a'], { versionId }))).toMatch(/^version id .* is not a plain name$/);
  });

  it('knows two files with the same bytes as one blob', () => {
    const v = version(['a', 'b']);
    expect(versionBlobs(v)).toEqual(new Map([[SHA, 1]]));
  });
});

describe('messages never carry a URL signature', () => {
  it('redacts the query of a presigned URL', () => {
    expect(redactUrl('https://bucket.s3.example/m/v1/a.bin?X-Amz-Signature=abc&X-Amz-Credential=k')).toBe('https://bucket.s3.example/m/v1/a.bin');
    expect(redactUrl('not a url')).toBe('(an invalid URL)');
  });
  it('sizes read in GiB, or in bytes when small', () => {
    expect(sizeText(200 * 1024 ** 3)).toBe('200.00 GiB');
    expect(sizeText(1536)).toBe('1536 bytes');
    expect(sizeText(0)).toBe('0.00 GiB');
  });
});

/** A simulated runtime's assignment fetching version `v`. */
const assignment = (v: VersionArtifact): Assignment => ({
  assignmentId: 'asg_1',
  deploymentId: 'dep_1',
  deploymentName: 'd',
  model: 'm',
  deploymentGeneration: 1,
  runtime: { kind: 'simulated', model: 'm', ttftMs: 1, tokensPerSecond: 1, loadMs: 0, memoryMiB: 1, failureRate: 0 },
  artifact: null,
  restartPolicy: { mode: 'never', maxRestarts: 0, backoffMs: 0 },
  resources: { gpus: 0, memoryMiB: 1 },
  version: v,
  startup: { timeoutMs: 600_000, probeIntervalMs: 100, failureThreshold: 3 },
  templateHash: 't',
});

describe('policyRefusal of a version', () => {
  const policy = AgentPolicy.parse({ simulated: true });

  it('accepts http and https URLs', () => {
    const v = version(['a', 'b']);
    v.files[1]!.url = 'http://127.0.0.1:8787/artifacts/v1/x?exp=1&sig=s';
    expect(policyRefusal(policy, assignment(v))).toBeNull();
  });

  it.each([
    ['file:///etc/shadow', 'file:'],
    ['ftp://host/a', 'ftp:'],
    ['data:,hello', 'data:'],
    ['not a url', 'malformed'],
  ])('refuses %s, naming the scheme but never the URL', (url, scheme) => {
    const v = version(['a', 'b']);
    v.files[1]!.url = url;
    const refusal = policyRefusal(policy, assignment(v));
    expect(refusal).toBe(`version mv_1: file b has a ${scheme} URL; only http: and https: URLs are fetched`);
  });

  it('refuses a path that would leave the folder', () => {
    expect(policyRefusal(policy, assignment(version(['../x'])))).toBe(`version mv_1: file "../x": a path must not have a '..' segment`);
  });

  it('parses a policy file without cache settings, with the defaults', () => {
    expect(cacheSettings(policy)).toEqual({ maxBytes: 200 * 1024 ** 3, stallSeconds: 120 });
    expect(cacheSettings(AgentPolicy.parse({ cache: { dir: '/var/cache/lunanexa', maxBytes: 1024 } }))).toEqual({
      dir: '/var/cache/lunanexa',
      maxBytes: 1024,
      stallSeconds: 120,
    });
    expect(AgentPolicy.safeParse({ cache: { dir: 'relative' } }).success).toBe(false);
    expect(AgentPolicy.safeParse({ cache: { maxBytes: 1, unknown: 1 } }).success).toBe(false);
  });
});

describe('progress of a runtime pulling its version', () => {
  const NOW = 50_000_000;
  const facts = (extra: Partial<RuntimeFacts>): RuntimeFacts => ({
    assignment: assignment(version(['a'])),
    state: 'pulling',
    gen: 1,
    restarts: 0,
    message: null,
    launchStartedAt: NOW - 10_000,
    load: IDLE,
    ...extra,
  });

  it('carries the bytes done against the total, and the time counted against the start timeout until the pull began', () => {
    const report = runtimeReport(facts({ pull: { since: NOW - 7_000, bytesDone: 300, bytesTotal: 1_000 } }), NOW);
    expect(report.progress).toEqual({ elapsedMs: 3_000, timeoutMs: 600_000, bytesDone: 300, bytesTotal: 1_000 });
    expect(RuntimeReport.parse(report)).toEqual(report);
  });

  it('has no bytes outside a pull', () => {
    expect(runtimeReport(facts({ state: 'starting', pull: null }), NOW).progress).toEqual({ elapsedMs: 10_000, timeoutMs: 600_000 });
    expect(runtimeReport(facts({ state: 'preparing' }), NOW).progress).toEqual({ elapsedMs: 10_000, timeoutMs: 600_000 });
  });
});
