import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../shared/ids.js';
import type { ManifestFile } from '../../shared/contracts/registry.js';
import { s3ArtifactStore } from '../../functions/store/artifacts/s3.js';
import { ArtifactsS3Config } from '../../functions/kernel/config.js';
import type { ArtifactStore, VersionFolder } from '../../functions/kernel/ports/artifact-store.js';

/**
 * The S3 artifact store against a real S3-compatible server (s3rver, on loopback): verification of a version's
 * objects under a key prefix, and presigned URLs that download, resume and expire. s3rver checks a presigned
 * URL's expiry and access key id, not its SigV4 signature: a forged signature is AWS's (or MinIO's) to refuse.
 */

// The SDK warns once per process that its releases after January 2027 need Node 22; Node 20 runs these.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const FILES: Record<string, Buffer> = {
  'config.json': Buffer.from('{"architectures":["LlamaForCausalLM"],"hidden_size":64}'),
  'model.safetensors': Buffer.from(Array.from({ length: 150_000 }, (_, i) => (i * 13) & 0xff)),
  'tokenizer/tokenizer.json': Buffer.from('{"version":"1.0","model":{"type":"BPE"}}'),
};
const MANIFEST: ManifestFile[] = Object.entries(FILES).map(([path, bytes]) => ({
  path,
  size: bytes.length,
  sha256: createHash('sha256').update(bytes).digest('hex'),
}));
const TOTAL = Object.values(FILES).reduce((sum, bytes) => sum + bytes.length, 0);
const PREFIX = 'team-a/models';
const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

describe('S3 artifact store', () => {
  let server: S3rver;
  let dir: string;
  let endpoint: string;
  let uploader: S3Client;
  let store: ArtifactStore;
  const workspaceId = newId('workspace');
  const folder = (version: string): VersionFolder => ({ workspaceId, model: 'tiny-llama', version });
  const keyOf = (version: string, path: string) => `${PREFIX}/${workspaceId}/tiny-llama/${version}/${path}`;
  /** Uploads a version's objects, as an operator does with their own tools. */
  const upload = async (version: string, files: Record<string, Buffer>) => {
    for (const [path, bytes] of Object.entries(files)) await uploader.send(new PutObjectCommand({ Bucket: 'models', Key: keyOf(version, path), Body: bytes }));
  };
  const storeWith = (overrides: Partial<ArtifactsS3Config>) =>
    s3ArtifactStore(ArtifactsS3Config.parse({ bucket: 'models', endpoint, forcePathStyle: true, prefix: PREFIX, ...CREDENTIALS, ...overrides }));
  const nowS = () => Math.floor(Date.now() / 1000);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-s3-'));
    server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true, configureBuckets: [{ name: 'models', configs: [] }] });
    const { port } = await server.run();
    endpoint = `http://127.0.0.1:${port}`;
    uploader = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials: CREDENTIALS });
    store = storeWith({});
    await upload('v1', FILES);
  });
  afterAll(async () => {
    uploader?.destroy();
    await server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('verifies a version whose objects match the manifest, reading every byte', async () => {
    expect(await store.verify(folder('v1'), MANIFEST)).toEqual({ files: 3, bytes: TOTAL, problems: [] });
  });

  it('reports a tampered object, a short one and a missing one, each by path', async () => {
    const model = FILES['model.safetensors']!;
    const tampered = Buffer.from(model);
    tampered[77_777] = tampered[77_777]! ^ 0xff;
    await upload('v2', { ...FILES, 'model.safetensors': tampered, 'config.json': FILES['config.json']!.subarray(1) });
    await uploader.send(new DeleteObjectCommand({ Bucket: 'models', Key: keyOf('v2', 'tokenizer/tokenizer.json') }));
    const report = await store.verify(folder('v2'), MANIFEST);
    expect(report.files).toBe(3);
    expect(report.bytes).toBe(model.length);
    expect(report.problems).toEqual([
      {
        path: 'config.json',
        problem: 'size_mismatch',
        expectedSize: FILES['config.json']!.length,
        actualSize: FILES['config.json']!.length - 1,
        actualSha256: null,
      },
      {
        path: 'model.safetensors',
        problem: 'digest_mismatch',
        expectedSize: model.length,
        actualSize: model.length,
        actualSha256: createHash('sha256').update(tampered).digest('hex'),
      },
      { path: 'tokenizer/tokenizer.json', problem: 'missing', expectedSize: FILES['tokenizer/tokenizer.json']!.length, actualSize: null, actualSha256: null },
    ]);
  });

  it('finds nothing of a version outside its prefix: a store without the prefix reports every file missing', async () => {
    const report = await storeWith({ prefix: undefined }).verify(folder('v1'), MANIFEST);
    expect(report.problems.map((p) => p.problem)).toEqual(['missing', 'missing', 'missing']);
  });

  it('hands out presigned URLs that download the object and resume it with Range', async () => {
    const bytes = FILES['model.safetensors']!;
    const url = await store.fileUrl(folder('v1'), 'model.safetensors', nowS() + 600);
    expect(url).toContain(`/models/${PREFIX}/${workspaceId}/tiny-llama/v1/model.safetensors?`);
    expect(url).toContain('X-Amz-Signature=');
    expect(url).not.toContain(`${CREDENTIALS.secretAccessKey}&`);
    const whole = await fetch(url);
    expect(whole.status).toBe(200);
    expect(Buffer.from(await whole.arrayBuffer()).equals(bytes)).toBe(true);
    const tail = await fetch(url, { headers: { range: 'bytes=100000-' } });
    expect(tail.status).toBe(206);
    expect(tail.headers.get('content-range')).toBe(`bytes 100000-${bytes.length - 1}/${bytes.length}`);
    expect(Buffer.from(await tail.arrayBuffer()).equals(bytes.subarray(100_000))).toBe(true);
    const nested = await fetch(await store.fileUrl(folder('v1'), 'tokenizer/tokenizer.json', nowS() + 600));
    expect(Buffer.from(await nested.arrayBuffer()).equals(FILES['tokenizer/tokenizer.json']!)).toBe(true);
  });

  it('signs a URL to expire at the time asked: one already past is refused by the server', async () => {
    const url = new URL(await store.fileUrl(folder('v1'), 'config.json', nowS() - 60));
    const signedAt = url.searchParams.get('X-Amz-Date')!;
    const at =
      Date.UTC(
        +signedAt.slice(0, 4),
        +signedAt.slice(4, 6) - 1,
        +signedAt.slice(6, 8),
        +signedAt.slice(9, 11),
        +signedAt.slice(11, 13),
        +signedAt.slice(13, 15),
      ) / 1000;
    expect(at + Number(url.searchParams.get('X-Amz-Expires'))).toBe(nowS() - 60);
    const expired = await fetch(url);
    expect(expired.status).toBe(403);
    expect(await expired.text()).toContain('Request has expired');
  });

  it('a URL signed with credentials the server does not know is refused', async () => {
    const stranger = storeWith({ accessKeyId: 'NOT-A-KEY', secretAccessKey: 'nope' });
    const response = await fetch(await stranger.fileUrl(folder('v1'), 'config.json', nowS() + 600));
    expect(response.status).toBe(403);
    expect(await response.text()).toContain('InvalidAccessKeyId');
  });

  it('a store it cannot reach fails the verification as unavailable (503), never as a report on the files', async () => {
    const away = storeWith({ endpoint: 'http://127.0.0.1:9' });
    await expect(away.verify(folder('v1'), MANIFEST.slice(0, 1))).rejects.toMatchObject({ code: 'unavailable', status: 503 });
  });
});
