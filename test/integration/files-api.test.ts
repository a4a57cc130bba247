import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { mkdtemp, readdir, readFile, rm, stat, truncate } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HeadObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { eq } from 'drizzle-orm';
import OpenAI, { NotFoundError, toFile } from 'openai';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { files } from '../../functions/store/schema/index.js';
import { OpenAIErrorEnvelope } from '../../shared/contracts/openai.js';
import { FileObject } from '../../shared/contracts/openai-files.js';
import { PG_URL } from '../helpers/pg.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/**
 * The OpenAI Files API on /v1 (docs/files.md) against a real control plane: the official `openai` SDK, unmodified,
 * uploads, lists (across pages), reads back and deletes files; the bytes live in the artifact store (the local
 * directory, or a bucket on s3rver), never in the database. Bad uploads are refused in OpenAI's envelope and leave
 * nothing behind, and a large file crosses the plane as a stream, both ways.
 */

// The SDK warns once per process that its releases after January 2027 need Node 22; Node 20 runs these.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

const MiB = 1024 * 1024;
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
/** Bytes that differ from file to file and from offset to offset. */
function pattern(size: number, seed: number): Buffer {
  const bytes = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i += 1) bytes[i] = (i * 131 + seed * 7 + (i >> 8)) & 0xff;
  return bytes;
}

const sdk = (plane: TestPlane, apiKey = plane.adminToken) => new OpenAI({ baseURL: `${plane.url}/v1`, apiKey, maxRetries: 0 });

/** The workspace's file rows, deleted ones included: what the database holds of them. */
const rowsOf = async (plane: TestPlane, workspaceId = plane.workspaceId) =>
  (await plane.ports.store.db.select().from(files).where(eq(files.workspaceId, workspaceId))).map((row) => row.id).sort();

/** The answer of a refused call: its status and error envelope. */
async function refusal(response: Response): Promise<{ status: number; code: string | null; param: string | null; type: string }> {
  const { error } = OpenAIErrorEnvelope.parse(await response.json());
  return { status: response.status, code: error.code, param: error.param, type: error.type };
}

/**
 * An upload of `purpose=batch` and a file whose bytes `next` makes a chunk at a time (null: its end), sent as the
 * plane reads it: the client holds no more of the file than a chunk.
 */
function streamedUpload(plane: TestPlane, next: () => Promise<Uint8Array | null> | Uint8Array | null): Promise<Response> {
  const boundary = `streamed-${Date.now()}`;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`));
      controller.enqueue(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="large.jsonl"\r\n\r\n`));
    },
    async pull(controller) {
      const chunk = await next();
      if (chunk) return controller.enqueue(chunk);
      controller.enqueue(Buffer.from(`\r\n--${boundary}--\r\n`));
      controller.close();
    },
  });
  return fetch(`${plane.url}/v1/files`, {
    method: 'POST',
    headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
    body,
    duplex: 'half',
  } as RequestInit);
}

describe('the Files API on the local artifact store', () => {
  let plane: TestPlane;
  let client: OpenAI;
  /** Where the plane keeps the workspace's files. */
  let filesDir: string;
  /** Everything under the files folder, `.part` files of unfinished uploads included. */
  const stored = async () => (await readdir(filesDir).catch(() => [] as string[])).sort();
  const post = (body: BodyInit, headers: Record<string, string> = {}) =>
    fetch(`${plane.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${plane.adminToken}`, ...headers }, body });
  const form = (fields: Record<string, string | [Uint8Array, string]>) => {
    const data = new FormData();
    for (const [name, value] of Object.entries(fields)) {
      if (typeof value === 'string') data.append(name, value);
      else data.append(name, new Blob([value[0] as Uint8Array<ArrayBuffer>]), value[1]);
    }
    return data;
  };

  /** A body that says it is over the limit and sends a byte: the answer comes before the rest is awaited. */
  const declaredOverLimit = () =>
    new Promise<Response>((resolve, reject) => {
      const request = httpRequest(`${plane.url}/v1/files`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'multipart/form-data; boundary=b', 'content-length': String(61 * MiB) },
      });
      request.on('response', (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () => {
          resolve(new Response(Buffer.concat(chunks), { status: answer.statusCode }));
          request.destroy();
        });
      });
      request.on('error', reject);
      request.write('-');
    });

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: { filesMaxBytes: 60 * MiB } });
    client = sdk(plane);
    filesDir = join(plane.dataDir, 'artifacts', '_data', plane.workspaceId, 'files');
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  it('round-trips a file through the official SDK: create, retrieve, content, delete, audited', async () => {
    const bytes = pattern(300_000, 1);
    const created = await client.files.create({ file: await toFile(bytes, 'rows.jsonl'), purpose: 'batch' });
    expect(FileObject.parse(created)).toEqual({
      id: created.id,
      object: 'file',
      bytes: bytes.length,
      created_at: created.created_at,
      filename: 'rows.jsonl',
      purpose: 'batch',
      status: 'processed',
      expires_at: null,
    });
    expect(created.id).toMatch(/^file_[0-9A-Z]{26}$/);
    expect(Math.abs(created.created_at - Date.now() / 1000)).toBeLessThan(60);
    // The bytes are the artifact store's object, not a row's.
    expect((await readFile(join(filesDir, created.id))).equals(bytes)).toBe(true);
    const [row] = await plane.ports.store.db.select().from(files).where(eq(files.id, created.id));
    expect(row).toMatchObject({ objectKey: `_data/${plane.workspaceId}/files/${created.id}`, sha256: sha256(bytes), bytes: bytes.length });

    expect(await client.files.retrieve(created.id)).toEqual(created);
    const content = await client.files.content(created.id);
    expect(content.headers.get('content-type')).toBe('application/octet-stream');
    expect(content.headers.get('content-length')).toBe(String(bytes.length));
    expect(content.headers.get('content-disposition')).toBe("attachment; filename*=UTF-8''rows.jsonl");
    const back = Buffer.from(await content.arrayBuffer());
    expect(back.equals(bytes)).toBe(true);
    expect(sha256(back)).toBe(sha256(bytes));

    expect(await client.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true });
    await expect(client.files.retrieve(created.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(client.files.content(created.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(client.files.delete(created.id)).rejects.toBeInstanceOf(NotFoundError);
    expect(await stored()).not.toContain(created.id);

    for (const action of ['file.create', 'file.delete']) {
      const audit = (await (await plane.admin(`/api/v1/audit?action=${action}&target=${created.id}`)).json()) as { data: Array<{ details: object }> };
      expect(audit.data, action).toHaveLength(1);
      expect(JSON.stringify(audit.data[0]!.details)).not.toContain('rows.jsonl');
    }
  });

  it('lists files a page at a time, newest first by default, and the SDK follows the pages', async () => {
    const made: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      made.push((await client.files.create({ file: await toFile(pattern(100 + i, i), `list-${i}.txt`), purpose: i < 3 ? 'user_data' : 'batch' })).id);
    }
    const all: string[] = [];
    for await (const file of client.files.list({ limit: 2, order: 'asc' })) all.push(file.id);
    expect(all.filter((id) => made.includes(id))).toEqual(made);

    const first = await client.files.list({ limit: 2 });
    expect(first.data.map((f) => f.id)).toEqual([made[4], made[3]]);
    expect(first.has_more).toBe(true);
    const raw = (await (await plane.admin('/v1/files?limit=2')).json()) as Record<string, unknown>;
    expect(raw).toMatchObject({ object: 'list', first_id: made[4], last_id: made[3], has_more: true });

    const userData: string[] = [];
    for await (const file of client.files.list({ purpose: 'user_data', limit: 1 })) userData.push(file.id);
    expect(userData).toEqual([made[2], made[1], made[0]]);
    const last = await client.files.list({ order: 'asc', after: made[3] });
    expect(last.data.map((f) => f.id)).toEqual([made[4]]);
    expect(last.has_more).toBe(false);

    for (const query of ['limit=0', 'limit=10001', 'order=up', 'purpose=fine-tune']) {
      expect(await refusal(await plane.admin(`/v1/files?${query}`)), query).toMatchObject({ status: 400, code: 'invalid_value' });
    }
  });

  it('refuses every bad upload with a 4xx in the OpenAI envelope, storing nothing', async () => {
    const rowsBefore = await rowsOf(plane);
    const storedBefore = await stored();
    const file: [Uint8Array, string] = [pattern(1000, 9), 'ok.jsonl'];
    const boundary = 'xTESTx';
    const multipart = (...parts: string[]) => `${parts.map((p) => `--${boundary}\r\n${p}\r\n`).join('')}--${boundary}--\r\n`;
    const filePart = (disposition: string, bytes = 'some bytes') => `Content-Disposition: form-data; ${disposition}\r\n\r\n${bytes}`;
    const purposePart = 'Content-Disposition: form-data; name="purpose"\r\n\r\nbatch';
    const asMultipart = { 'content-type': `multipart/form-data; boundary=${boundary}` };
    const cases: Array<[string, () => Promise<Response>, { status: number; code: string; param?: string | null }]> = [
      ['no file', () => post(form({ purpose: 'batch' })), { status: 400, code: 'missing_required_parameter', param: 'file' }],
      ['no purpose', () => post(form({ file })), { status: 400, code: 'missing_required_parameter', param: 'purpose' }],
      ['an unknown purpose', () => post(form({ file, purpose: 'fine-tune' })), { status: 400, code: 'invalid_value', param: 'purpose' }],
      ['purpose batch_output', () => post(form({ purpose: 'batch_output', file })), { status: 400, code: 'invalid_value', param: 'purpose' }],
      ['batch_output after the file', () => post(form({ file, purpose: 'batch_output' })), { status: 400, code: 'invalid_value', param: 'purpose' }],
      ['an empty file', () => post(form({ file: [new Uint8Array(0), 'empty.jsonl'], purpose: 'batch' })), { status: 400, code: 'bad_request' }],
      [
        'a file name of 256 bytes',
        () => post(form({ purpose: 'batch', file: [file[0], 'é'.repeat(128)] })),
        { status: 400, code: 'invalid_value', param: 'file' },
      ],
      [
        'a control character in the file name',
        () => post(multipart(purposePart, filePart('name="file"; filename="a\u0001b.jsonl"')), asMultipart),
        { status: 400, code: 'invalid_value', param: 'file' },
      ],
      ['a field named file that is no file', () => post(form({ purpose: 'batch', file: 'just text' })), { status: 400, code: 'invalid_value', param: 'file' }],
      [
        'two files',
        () => post(multipart(filePart('name="file"; filename="a"'), filePart('name="file"; filename="b"'), purposePart), asMultipart),
        { status: 400, code: 'invalid_value', param: 'file' },
      ],
      [
        'expires_after under an hour',
        () => post(form({ purpose: 'batch', 'expires_after[anchor]': 'created_at', 'expires_after[seconds]': '60', file })),
        { status: 400, code: 'invalid_value', param: 'expires_after[seconds]' },
      ],
      [
        'expires_after of another anchor',
        () => post(form({ purpose: 'batch', 'expires_after[anchor]': 'last_active_at', 'expires_after[seconds]': '3600', file })),
        { status: 400, code: 'invalid_value', param: 'expires_after[anchor]' },
      ],
      [
        'expires_after without its anchor',
        () => post(form({ purpose: 'batch', 'expires_after[seconds]': '3600', file })),
        { status: 400, code: 'invalid_value', param: 'expires_after' },
      ],
      ['a JSON body', () => post(JSON.stringify({ purpose: 'batch' }), { 'content-type': 'application/json' }), { status: 400, code: 'invalid_content_type' }],
      [
        'a malformed multipart body',
        () => post(`--${boundary}\r\n${filePart('name="file"; filename="a"')}`, asMultipart),
        { status: 400, code: 'invalid_multipart' },
      ],
      ['a body with no boundary in it', () => post('nothing of the form', asMultipart), { status: 400, code: 'invalid_multipart' }],
      ['a declared length over the limit', () => declaredOverLimit(), { status: 413, code: 'request_too_large' }],
    ];
    for (const [what, call, expected] of cases) {
      expect(await refusal(await call()), what).toMatchObject({ type: 'invalid_request_error', ...expected });
    }
    expect(await rowsOf(plane)).toEqual(rowsBefore);
    expect(await stored()).toEqual(storedBefore);
  });

  it('refuses a streamed file over filesMaxBytes with 413 once the limit is passed, keeping nothing', async () => {
    const rowsBefore = await rowsOf(plane);
    const storedBefore = await stored();
    let sent = 0;
    // Up to twice the limit: the plane must stop well before the end.
    const response = await streamedUpload(plane, () => {
      if (sent >= 120 * MiB) return null;
      sent += MiB;
      return new Uint8Array(MiB).fill(0x61);
    });
    expect(await refusal(response)).toMatchObject({ status: 413, code: 'request_too_large', param: 'file' });
    expect(await rowsOf(plane)).toEqual(rowsBefore);
    expect(await stored()).toEqual(storedBefore);
  });

  it("answers 404 for another workspace's file and for an id that is no file id, and touches nothing", async () => {
    const mine = await client.files.create({ file: await toFile(pattern(64, 3), 'mine.txt'), purpose: 'user_data' });
    const created = await plane.admin('/api/v1/workspaces', { method: 'POST', body: JSON.stringify({ name: 'files-other' }) });
    expect(created.status).toBe(201);
    const other = sdk(plane, ((await created.json()) as { adminToken: { token: string } }).adminToken.token);
    await expect(other.files.retrieve(mine.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.files.content(mine.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(other.files.delete(mine.id)).rejects.toBeInstanceOf(NotFoundError);
    const theirs: string[] = [];
    for await (const file of other.files.list()) theirs.push(file.id);
    expect(theirs).toEqual([]);
    expect(await client.files.retrieve(mine.id)).toEqual(mine);
    for (const id of ['file_nope', 'not-a-file', mine.id.toLowerCase(), `${mine.id}0`]) {
      for (const [method, path] of [
        ['GET', `/v1/files/${id}`],
        ['GET', `/v1/files/${id}/content`],
        ['DELETE', `/v1/files/${id}`],
      ] as const) {
        expect(await refusal(await plane.admin(path, { method })), `${method} ${path}`).toEqual({
          status: 404,
          code: 'not_found',
          param: null,
          type: 'not_found_error',
        });
      }
    }
  });

  it('answers no_artifact_store, in the envelope, where the plane has no store (the Worker without a bucket)', async () => {
    const { objects } = plane.ports;
    plane.ports.objects = undefined;
    try {
      for (const [method, path] of [
        ['GET', '/v1/files'],
        ['POST', '/v1/files'],
        ['GET', '/v1/files/file_01J00000000000000000000000'],
      ] as const) {
        const init = method === 'POST' ? { method, body: form({ purpose: 'batch', file: [new Uint8Array(8), 'x'] }) } : { method };
        const response = await fetch(`${plane.url}${path}`, { ...init, headers: { authorization: `Bearer ${plane.adminToken}` } });
        expect(await refusal(response), `${method} ${path}`).toMatchObject({ status: 409, code: 'no_artifact_store' });
      }
    } finally {
      plane.ports.objects = objects;
    }
  });

  it('streams a 50 MiB file both ways: bytes reach the store as they arrive, and come back whole', async () => {
    const size = 50 * MiB;
    const hash = createHash('sha256');
    let sent = 0;
    /** The most the client had sent beyond what was in the store: what the plane held of the upload, and the sockets. */
    let ahead = 0;
    const inStore = async () => {
      const part = (await stored()).find((name) => name.endsWith('.part'));
      return part ? (await stat(join(filesDir, part)).catch(() => ({ size: 0 }))).size : 0;
    };
    const next = async () => {
      if (sent >= size) return null;
      // A plane that held the body whole would have stored nothing yet: `ahead` would reach the whole file.
      if (sent % (4 * MiB) === 0 && sent > 0) ahead = Math.max(ahead, sent - (await inStore()));
      const chunk = pattern(MiB, sent / MiB);
      hash.update(chunk);
      sent += chunk.length;
      return chunk;
    };
    let peakRss = 0;
    const sampling = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 10);
    const baselineRss = process.memoryUsage().rss;
    try {
      const response = await streamedUpload(plane, next);
      expect(response.status, await response.clone().text()).toBe(200);
      const created = FileObject.parse(await response.json());
      expect(created.bytes).toBe(size);
      const download = await client.files.content(created.id);
      expect(download.headers.get('content-length')).toBe(String(size));
      const back = createHash('sha256');
      let received = 0;
      for await (const chunk of download.body as unknown as AsyncIterable<Uint8Array>) {
        back.update(chunk);
        received += chunk.length;
      }
      expect(received).toBe(size);
      expect(back.digest('hex')).toBe(hash.digest('hex'));
      console.info(
        `50 MiB file: at most ${(ahead / MiB).toFixed(1)} MiB sent and not yet stored; resident memory of the process (plane and ` +
          `client) at most ${((peakRss - baselineRss) / MiB).toFixed(1)} MiB over its start, up and down`,
      );
      expect(ahead).toBeLessThan(20 * MiB);
      await client.files.delete(created.id);
    } finally {
      clearInterval(sampling);
    }
  }, 120_000);

  it('serves a 1 GiB object to a client that stalls, without reading it ahead into memory', async () => {
    const created = await client.files.create({ file: await toFile(pattern(1000, 5), 'huge.bin'), purpose: 'user_data' });
    // The stored object made 1 GiB (sparse: no disk is used), past what this plane accepts as an upload: a plane
    // that read an object ahead of its client would hold most of it within the stall.
    await truncate(join(filesDir, created.id), 1024 * MiB);
    const baseline = process.memoryUsage().rss;
    let peak = baseline;
    const sampling = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
    try {
      const download = await client.files.content(created.id);
      expect(download.headers.get('content-length')).toBe(String(1024 * MiB));
      const reader = download.body!.getReader();
      expect((await reader.read()).done).toBe(false);
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      await reader.cancel();
      console.info(`1 GiB object, download stalled 1.5 s: resident memory at most ${((peak - baseline) / MiB).toFixed(1)} MiB over its start`);
      expect(peak - baseline).toBeLessThan(256 * MiB);
    } finally {
      clearInterval(sampling);
    }
    await client.files.delete(created.id);
  });
});

describe('the Files API on an S3 bucket (s3rver)', () => {
  const PREFIX = 'team-a/store';
  const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
  let server: S3rver;
  let dir: string;
  let bucket: S3Client;
  let plane: TestPlane;
  let client: OpenAI;
  const keyOf = (id: string) => `${PREFIX}/_data/${plane.workspaceId}/files/${id}`;
  const objects = async () =>
    ((await bucket.send(new ListObjectsV2Command({ Bucket: 'lunanexa', Prefix: `${PREFIX}/_data/` }))).Contents ?? []).map((o) => o.Key).sort();

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-files-s3-'));
    server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true, configureBuckets: [{ name: 'lunanexa', configs: [] }] });
    const { port } = await server.run();
    const endpoint = `http://127.0.0.1:${port}`;
    bucket = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials: CREDENTIALS });
    // On PostgreSQL where the suites have one (CI), as the other suite runs on PGlite.
    plane = await startTestPlane({
      store: PG_URL ? 'pg' : 'pglite',
      config: {
        filesMaxBytes: 24 * MiB,
        artifactsS3: { bucket: 'lunanexa', endpoint, region: 'us-east-1', forcePathStyle: true, prefix: PREFIX, ...CREDENTIALS },
      },
    });
    client = sdk(plane);
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
    bucket?.destroy();
    await server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('round-trips a small file (one PutObject) and a 20 MiB one (a multipart upload) through the SDK', async () => {
    for (const [size, name] of [
      [5_000, 'small.jsonl'],
      [20 * MiB + 12_345, 'parts.jsonl'],
    ] as const) {
      const bytes = pattern(size, size % 251);
      const created = await client.files.create({ file: await toFile(bytes, name), purpose: 'user_data' });
      expect(created).toMatchObject({ object: 'file', bytes: size, filename: name, purpose: 'user_data', status: 'processed' });
      expect((await bucket.send(new HeadObjectCommand({ Bucket: 'lunanexa', Key: keyOf(created.id) }))).ContentLength).toBe(size);
      expect(await client.files.retrieve(created.id)).toEqual(created);
      const back = Buffer.from(await (await client.files.content(created.id)).arrayBuffer());
      expect(back.length, name).toBe(size);
      expect(sha256(back), name).toBe(sha256(bytes));
      expect(await client.files.delete(created.id)).toEqual({ id: created.id, object: 'file', deleted: true });
      await expect(bucket.send(new HeadObjectCommand({ Bucket: 'lunanexa', Key: keyOf(created.id) }))).rejects.toMatchObject({
        $metadata: { httpStatusCode: 404 },
      });
      await expect(client.files.content(created.id)).rejects.toBeInstanceOf(NotFoundError);
    }
  }, 60_000);

  it('keeps no object of an upload over the limit, nor of an empty one', async () => {
    const before = await objects();
    const rowsBefore = await rowsOf(plane);
    for (const [bytes, status] of [
      [new Uint8Array(25 * MiB), 413],
      [new Uint8Array(0), 400],
    ] as const) {
      const data = new FormData();
      data.append('purpose', 'batch');
      data.append('file', new Blob([bytes]), 'refused.jsonl');
      const response = await fetch(`${plane.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${plane.adminToken}` }, body: data });
      expect((await refusal(response)).status).toBe(status);
    }
    expect(await objects()).toEqual(before);
    expect(await rowsOf(plane)).toEqual(rowsBefore);
  }, 60_000);
});
