import { describe, expect, it } from 'vitest';
import { newId } from '../../shared/ids.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { checkSignature, localFileUrl, parseFilePath, signFile, LOCAL_FILES_PREFIX } from '../../functions/store/artifacts/local-urls.js';
import { byteRange } from '../../functions/api/http/byte-range.js';
import { withArtifactUrls } from '../../functions/services/artifact-urls.js';
import { fileKey, servesFiles, type ArtifactStore } from '../../functions/kernel/ports/artifact-store.js';
import { ControlPlaneConfig } from '../../functions/kernel/config.js';
import { configFromEnv, NodeEnv } from '../../functions/hosts/node-env.js';

const KEY = 'k'.repeat(43);
const WS = newId('workspace');
const FOLDER = { workspaceId: WS, model: 'tiny-llama', version: 'v1.2' };
const NOW = 1_900_000_000;

/** The path and query of a URL the local store made, as the route receives them. */
const partsOf = (url: string) => {
  const parsed = new URL(url);
  return {
    raw: parsed.pathname.slice(LOCAL_FILES_PREFIX.length + 1),
    exp: parsed.searchParams.get('exp') ?? undefined,
    sig: parsed.searchParams.get('sig') ?? undefined,
  };
};

describe('local artifact URLs', () => {
  it('name the file under the public URL and round-trip through the parser, whatever its characters', () => {
    for (const path of ['config.json', 'tokenizer/tokenizer.json', 'a b/naïve?#%.bin', 'x/y/z/w.safetensors']) {
      const url = localFileUrl({ baseUrl: 'https://plane.example/', key: KEY, folder: FOLDER, path, exp: NOW });
      expect(url.startsWith(`https://plane.example/artifacts/v1/${WS}/tiny-llama/v1.2/`), url).toBe(true);
      const { raw, exp, sig } = partsOf(url);
      const parsed = parseFilePath(raw);
      expect(parsed).toEqual({ ok: true, folder: FOLDER, path, file: fileKey(FOLDER, path) });
      expect(checkSignature({ key: KEY, file: fileKey(FOLDER, path), exp, sig, nowS: NOW })).toBe('ok');
    }
  });

  it('are good until their expiry second and expired after it', () => {
    const { exp, sig } = partsOf(localFileUrl({ baseUrl: 'http://127.0.0.1:1', key: KEY, folder: FOLDER, path: 'a.bin', exp: NOW }));
    const file = fileKey(FOLDER, 'a.bin');
    expect(checkSignature({ key: KEY, file, exp, sig, nowS: NOW })).toBe('ok');
    expect(checkSignature({ key: KEY, file, exp, sig, nowS: NOW + 1 })).toBe('expired');
  });

  it('refuse any change of path, expiry, signature or key', () => {
    const file = fileKey(FOLDER, 'a.bin');
    const sig = signFile(KEY, file, NOW);
    const flipped = (sig[0] === '0' ? '1' : '0') + sig.slice(1);
    const cases: Array<[string, Parameters<typeof checkSignature>[0]]> = [
      ['other file', { key: KEY, file: fileKey(FOLDER, 'b.bin'), exp: String(NOW), sig, nowS: NOW }],
      ['other version', { key: KEY, file: fileKey({ ...FOLDER, version: 'v2' }, 'a.bin'), exp: String(NOW), sig, nowS: NOW }],
      ['later expiry', { key: KEY, file, exp: String(NOW + 3600), sig, nowS: NOW }],
      ['flipped signature', { key: KEY, file, exp: String(NOW), sig: flipped, nowS: NOW }],
      ['upper-case signature', { key: KEY, file, exp: String(NOW), sig: sig.toUpperCase(), nowS: NOW }],
      ['short signature', { key: KEY, file, exp: String(NOW), sig: sig.slice(2), nowS: NOW }],
      ['another key', { key: 'j'.repeat(43), file, exp: String(NOW), sig, nowS: NOW }],
      ['no signature', { key: KEY, file, exp: String(NOW), sig: undefined, nowS: NOW }],
      ['no expiry', { key: KEY, file, exp: undefined, sig, nowS: NOW }],
      ['expiry not a number', { key: KEY, file, exp: `${NOW}.0`, sig, nowS: NOW }],
    ];
    for (const [what, input] of cases) expect(checkSignature(input), what).toBe('bad_signature');
    // An expired URL is said to be expired only when the plane did sign it.
    expect(checkSignature({ key: KEY, file, exp: String(NOW), sig: flipped, nowS: NOW + 10 })).toBe('bad_signature');
  });

  it.each([
    [`${WS}/tiny-llama/v1`, 'names no file'],
    [`ws_nope/tiny-llama/v1/a.bin`, 'workspace id'],
    [`${WS}/Tiny_Llama/v1/a.bin`, 'model'],
    [`${WS}/tiny-llama/-v1/a.bin`, 'version'],
    [`${WS}/tiny-llama/v1/..%2F..%2Fsecret.key`, "'..' segment"],
    [`${WS}/tiny-llama/v1/a/../../../b`, "'..' segment"],
    [`${WS}/tiny-llama/v1/./a.bin`, "'.' segment"],
    [`${WS}/tiny-llama/v1/%2Fetc%2Fpasswd`, "no leading '/'"],
    [`${WS}/tiny-llama/v1/a%5Cb`, 'backslash'],
    [`${WS}/tiny-llama/v1/a//b`, 'empty segment'],
    [`${WS}/tiny-llama/v1/a%01b`, 'control characters'],
    [`${WS}/tiny-llama/v1/%E0%A4%A`, 'percent-encoding'],
    [`${WS}/tiny-llama%2Fv1/x/a.bin`, 'model'],
  ])('refuse the path %s (%s)', (raw, problem) => {
    const parsed = parseFilePath(raw);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.problem).toContain(problem);
  });
});

describe('byte ranges', () => {
  it.each([
    [undefined, 100, { kind: 'whole' }],
    ['bytes=0-', 100, { kind: 'part', start: 0, end: 99 }],
    ['bytes=40-', 100, { kind: 'part', start: 40, end: 99 }],
    ['bytes=99-', 100, { kind: 'part', start: 99, end: 99 }],
    ['bytes=10-19', 100, { kind: 'part', start: 10, end: 19 }],
    ['bytes=10-10', 100, { kind: 'part', start: 10, end: 10 }],
    ['bytes=90-500', 100, { kind: 'part', start: 90, end: 99 }],
    ['bytes=-10', 100, { kind: 'part', start: 90, end: 99 }],
    ['bytes=-500', 100, { kind: 'part', start: 0, end: 99 }],
    [' bytes=5-6 ', 100, { kind: 'part', start: 5, end: 6 }],
    ['bytes=100-', 100, { kind: 'unsatisfiable' }],
    ['bytes=250-300', 100, { kind: 'unsatisfiable' }],
    ['bytes=-0', 100, { kind: 'unsatisfiable' }],
    ['bytes=0-', 0, { kind: 'unsatisfiable' }],
    ['bytes=-5', 0, { kind: 'unsatisfiable' }],
    // Ignored: the whole file is sent.
    ['bytes=20-10', 100, { kind: 'whole' }],
    ['bytes=0-1,5-6', 100, { kind: 'whole' }],
    ['items=0-1', 100, { kind: 'whole' }],
    ['bytes=-', 100, { kind: 'whole' }],
    ['bytes=a-b', 100, { kind: 'whole' }],
    ['bytes=1234567890123456-', 100, { kind: 'whole' }],
  ])('%j of %i bytes: %j', (header, size, expected) => {
    expect(byteRange(header, size)).toEqual(expected);
  });
});

describe('artifact URLs in a desired state', () => {
  const version = {
    versionId: 'mv_x',
    model: 'tiny-llama',
    version: 'v1.2',
    totalBytes: 3,
    files: [
      { path: 'a.bin', size: 1, sha256: 'a'.repeat(64), url: '' },
      { path: 'dir/b.bin', size: 2, sha256: 'b'.repeat(64), url: '' },
    ],
    urlsExpireAt: 0,
  };
  const spec = (withVersion: boolean) => ({ assignmentId: withVersion ? 'asg_v' : 'asg_plain', ...(withVersion ? { version } : {}) }) as unknown as Assignment;
  /** A store that says which file and expiry each URL is for. */
  const store: ArtifactStore = {
    verify: () => Promise.reject(new Error('not read here')),
    fileUrl: (folder, path, expiresAt) => Promise.resolve(`store://${fileKey(folder, path)}@${expiresAt}`),
  };

  it('fills every file of a version with a URL until now + the TTL, and leaves other assignments alone', async () => {
    const config = { artifactUrlTtlMs: 3_600_000 };
    const [plain, withVersion] = await withArtifactUrls({
      ctx: { config, artifacts: store },
      input: { workspaceId: WS, specs: [spec(false), spec(true)], nowMs: NOW * 1000 + 999 },
    });
    expect(plain).toEqual(spec(false));
    expect(withVersion!.version).toEqual({
      ...version,
      urlsExpireAt: NOW + 3600,
      files: [
        { ...version.files[0], url: `store://${WS}/tiny-llama/v1.2/a.bin@${NOW + 3600}` },
        { ...version.files[1], url: `store://${WS}/tiny-llama/v1.2/dir/b.bin@${NOW + 3600}` },
      ],
    });
    // The input is not changed: the stored spec keeps its empty URLs.
    expect(version.files[0]!.url).toBe('');
  });

  it('fails with 503 when a version is to be served and there is no store; signs plain states without one', async () => {
    const config = { artifactUrlTtlMs: 3_600_000 };
    expect(servesFiles(undefined)).toBe(false);
    expect(servesFiles(store)).toBe(true);
    await expect(withArtifactUrls({ ctx: { config }, input: { workspaceId: WS, specs: [spec(true)] } })).rejects.toMatchObject({
      code: 'unavailable',
      status: 503,
    });
    expect(await withArtifactUrls({ ctx: { config }, input: { workspaceId: WS, specs: [spec(false)] } })).toEqual([spec(false)]);
  });
});

describe('artifact store configuration', () => {
  it('defaults the URL TTL to an hour, above the desired-state TTL, and refuses one that is not', () => {
    const config = ControlPlaneConfig.parse({});
    expect(config.artifactUrlTtlMs).toBe(3_600_000);
    expect(config.artifactUrlTtlMs).toBeGreaterThan(config.desiredTtlMs);
    expect(() => ControlPlaneConfig.parse({ artifactUrlTtlMs: config.desiredTtlMs })).toThrow(/must exceed the desired-state TTL/);
    expect(() => ControlPlaneConfig.parse({ artifactUrlTtlMs: 8 * 24 * 3600_000 })).toThrow();
  });

  it('reads the S3 store from the environment, and refuses S3 settings without a bucket or half a key pair', () => {
    const env = (vars: Record<string, string>) => configFromEnv(NodeEnv.parse(vars));
    expect(env({}).artifactsS3).toBeUndefined();
    expect(
      env({ LUNANEXA_ARTIFACTS_S3_BUCKET: 'models', LUNANEXA_ARTIFACTS_S3_FORCE_PATH_STYLE: 'true', LUNANEXA_ARTIFACTS_S3_PREFIX: 'team-a/models' })
        .artifactsS3,
    ).toEqual({
      bucket: 'models',
      region: 'us-east-1',
      forcePathStyle: true,
      prefix: 'team-a/models',
    });
    expect(() => env({ LUNANEXA_ARTIFACTS_S3_ENDPOINT: 'http://127.0.0.1:9000' })).toThrow();
    expect(() => env({ LUNANEXA_ARTIFACTS_S3_BUCKET: 'models', LUNANEXA_ARTIFACTS_S3_ACCESS_KEY_ID: 'AKIA' })).toThrow(/both/);
    expect(() => env({ LUNANEXA_ARTIFACTS_S3_BUCKET: 'models', LUNANEXA_ARTIFACTS_S3_PREFIX: '/models/' })).toThrow();
    expect(env({ LUNANEXA_PUBLIC_URL: 'https://plane.example', LUNANEXA_ARTIFACT_URL_TTL_MS: '7200000' })).toMatchObject({
      publicUrl: 'https://plane.example',
      artifactUrlTtlMs: 7_200_000,
    });
  });
});
