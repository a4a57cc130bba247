import { createHash } from 'node:crypto';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { eq } from 'drizzle-orm';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Assignment } from '../../shared/contracts/desired.js';
import { newId } from '../../shared/ids.js';
import { assignments } from '../../functions/store/schema/index.js';
import { signDesiredState } from '../../functions/services/streams.js';
import type { ArtifactStore, VersionFolder } from '../../functions/kernel/ports/artifact-store.js';
import { enrollTestMachine } from '../helpers/machine.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/**
 * The local artifact store's signed URLs on a real plane (docs/artifacts.md): what a good URL serves (whole, a
 * range, HEAD), what a forged, expired, escaping or malformed one gets, and a signed desired state whose version
 * carries URLs that download its files. Verification through the API is registry.test.ts's.
 */

const FILES: Record<string, Buffer> = {
  'config.json': Buffer.from('{"architectures":["LlamaForCausalLM"]}'),
  'model.safetensors': Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7) & 0xff)),
  'tokenizer/tokenizer.json': Buffer.from('{"model":{"type":"BPE"}}'),
  'empty.txt': Buffer.alloc(0),
};
const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe('local artifact URLs', () => {
  let plane: TestPlane;
  let store: ArtifactStore;
  let folder: VersionFolder;
  const nowS = () => Math.floor(Date.now() / 1000);
  const urlOf = (path: string, exp = nowS() + 600) => store.fileUrl(folder, path, exp);
  const errorOf = async (response: Response) => ((await response.json()) as { error: { code: string; message: string; requestId: string } }).error;

  beforeAll(async () => {
    // The controller never runs after start: the assignment written by hand below stays as it is.
    plane = await startTestPlane({ config: { reconcileIntervalMs: 3_600_000 } });
    store = plane.ports.artifacts!;
    folder = { workspaceId: plane.workspaceId, model: 'tiny-llama', version: 'v1' };
    const root = join(plane.dataDir, 'artifacts', plane.workspaceId, 'tiny-llama', 'v1');
    for (const [path, bytes] of Object.entries(FILES)) {
      await mkdir(dirname(join(root, path)), { recursive: true });
      await writeFile(join(root, path), bytes);
    }
    // A link out of the version's folder: the data dir's secret key is right there.
    await symlink(join(plane.dataDir, 'secret.key'), join(root, 'escape.bin'));
  });
  afterAll(async () => {
    await plane?.stop();
  });

  it('a good URL serves the file whole, with its length, on the plane’s own URL', async () => {
    const url = await urlOf('model.safetensors');
    expect(url.startsWith(`${plane.url}/artifacts/v1/${plane.workspaceId}/tiny-llama/v1/model.safetensors?exp=`)).toBe(true);
    const response = await fetch(url);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-length')).toBe(String(FILES['model.safetensors']!.length));
    expect(response.headers.get('accept-ranges')).toBe('bytes');
    expect(response.headers.get('cache-control')).toContain('no-store');
    expect(Buffer.from(await response.arrayBuffer()).equals(FILES['model.safetensors']!)).toBe(true);
    const nested = await fetch(await urlOf('tokenizer/tokenizer.json'));
    expect(Buffer.from(await nested.arrayBuffer()).equals(FILES['tokenizer/tokenizer.json']!)).toBe(true);
    const empty = await fetch(await urlOf('empty.txt'));
    expect([empty.status, empty.headers.get('content-length'), (await empty.arrayBuffer()).byteLength]).toEqual([200, '0', 0]);
  });

  it('honours Range to resume (206 with Content-Range) and answers 416 past the end', async () => {
    const bytes = FILES['model.safetensors']!;
    const url = await urlOf('model.safetensors');
    const tail = await fetch(url, { headers: { range: 'bytes=100000-' } });
    expect(tail.status).toBe(206);
    expect(tail.headers.get('content-range')).toBe(`bytes 100000-${bytes.length - 1}/${bytes.length}`);
    expect(tail.headers.get('content-length')).toBe(String(bytes.length - 100_000));
    expect(Buffer.from(await tail.arrayBuffer()).equals(bytes.subarray(100_000))).toBe(true);
    const middle = await fetch(url, { headers: { range: 'bytes=10-19' } });
    expect(middle.status).toBe(206);
    expect(Buffer.from(await middle.arrayBuffer()).equals(bytes.subarray(10, 20))).toBe(true);
    const past = await fetch(url, { headers: { range: `bytes=${bytes.length}-` } });
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe(`bytes */${bytes.length}`);
    expect((await errorOf(past)).code).toBe('range_not_satisfiable');
  });

  it('answers HEAD with the length and no body', async () => {
    const head = await fetch(await urlOf('config.json'), { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(FILES['config.json']!.length));
    expect((await head.arrayBuffer()).byteLength).toBe(0);
    const ranged = await fetch(await urlOf('config.json'), { method: 'HEAD', headers: { range: 'bytes=5-' } });
    expect([ranged.status, ranged.headers.get('content-range')]).toEqual([206, `bytes 5-${FILES['config.json']!.length - 1}/${FILES['config.json']!.length}`]);
  });

  it('refuses a forged, altered or expired URL with 403 in the management envelope', async () => {
    const good = new URL(await urlOf('config.json'));
    const sig = good.searchParams.get('sig')!;
    const forged = new URL(good);
    forged.searchParams.set('sig', (sig[0] === '0' ? '1' : '0') + sig.slice(1));
    const longer = new URL(good);
    longer.searchParams.set('exp', String(Number(good.searchParams.get('exp')) + 86_400));
    const otherFile = new URL(good.href.replace('/config.json?', '/model.safetensors?'));
    const unsigned = new URL(good);
    unsigned.search = '';
    for (const url of [forged, longer, otherFile, unsigned]) {
      const response = await fetch(url);
      expect(response.status, url.href).toBe(403);
      const error = await errorOf(response);
      expect(error.code).toBe('forbidden');
      expect(error.requestId).toBe(response.headers.get('x-request-id'));
    }
    const expired = await fetch(await urlOf('config.json', nowS() - 5));
    expect(expired.status).toBe(403);
    expect((await errorOf(expired)).message).toContain('expired');
  });

  it('refuses a path that breaks the manifest rules with 400, whatever it is signed with', async () => {
    const { search } = new URL(await urlOf('config.json'));
    const base = `${plane.url}/artifacts/v1/${plane.workspaceId}/tiny-llama/v1`;
    for (const path of ['..%2F..%2F..%2Fsecret.key', 'a%5Cb', '%2Fetc%2Fpasswd', 'a//b']) {
      const response = await fetch(`${base}/${path}${search}`);
      expect(response.status, path).toBe(400);
      expect((await errorOf(response)).code).toBe('bad_request');
    }
    expect((await fetch(`${plane.url}/artifacts/v1/${plane.workspaceId}/tiny-llama${search}`)).status).toBe(400);
  });

  it('serves nothing outside the version folder or absent (404), even at a URL it signed', async () => {
    for (const path of ['escape.bin', 'missing.bin', 'tokenizer']) {
      const response = await fetch(await urlOf(path));
      expect(response.status, path).toBe(404);
      expect((await errorOf(response)).code).toBe('not_found');
    }
  });

  it('a signed desired state carries URLs for its version’s files, made at signing and never stored', async () => {
    const machine = await enrollTestMachine(plane, 'gpu-urls');
    const deployment = await applyTestDeployment(plane, 'tiny-chat', { nowhere: 'true' });
    const files = Object.entries(FILES).map(([path, bytes]) => ({ path, size: bytes.length, sha256: sha256(bytes), url: '' }));
    const spec = Assignment.parse({
      assignmentId: newId('assignment'),
      deploymentId: deployment.id,
      deploymentName: 'tiny-chat',
      model: 'tiny-llama',
      deploymentGeneration: 1,
      runtime: { kind: 'simulated', model: 'tiny-llama' },
      artifact: null,
      restartPolicy: {},
      resources: { gpus: 0, memoryMiB: 64 },
      version: {
        versionId: newId('modelVersion'),
        model: 'tiny-llama',
        version: 'v1',
        totalBytes: files.reduce((n, f) => n + f.size, 0),
        files,
        urlsExpireAt: 0,
      },
      templateHash: 'x',
    });
    await plane.systemCtx.db.insert(assignments).values({ id: spec.assignmentId, machineId: machine.machineId, deploymentId: deployment.id, spec });

    const signed = await signDesiredState({ ctx: { ...plane.systemCtx, artifacts: plane.ports.artifacts }, input: { machineId: machine.machineId } });
    const [carried] = (decodeJwt(signed.jws) as unknown as { assignments: Assignment[] }).assignments;
    const version = carried!.version!;
    expect(version.urlsExpireAt).toBeGreaterThanOrEqual(nowS() + 3_600 - 5);
    expect(version.urlsExpireAt).toBeGreaterThan(signed.exp);
    for (const file of version.files) {
      const response = await fetch(file.url);
      expect(response.status, file.path).toBe(200);
      expect(sha256(Buffer.from(await response.arrayBuffer()))).toBe(file.sha256);
    }
    const [stored] = await plane.systemCtx.db.select({ spec: assignments.spec }).from(assignments).where(eq(assignments.id, spec.assignmentId));
    expect(stored!.spec.version!.files.every((file) => file.url === '')).toBe(true);

    // Without a store to serve it (Workers), a version's assignment is not signed at all.
    await expect(signDesiredState({ ctx: { ...plane.systemCtx, artifacts: undefined }, input: { machineId: machine.machineId } })).rejects.toMatchObject({
      code: 'unavailable',
    });
  });
});
