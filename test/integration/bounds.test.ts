import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pino from 'pino';
import { SignJWT } from 'jose';
import { generateMachineKey } from '../../agent/state.js';
import { sha256Base64Url } from '../../shared/canonical.js';
import { ErrorEnvelope } from '../../shared/contracts/common.js';
import { OpenAIErrorEnvelope } from '../../shared/contracts/openai.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { TEST_INVENTORY, enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';

/**
 * Every value has a bound (issue 7, finding 1): NUL bytes, overlong strings and integers past their column's
 * range are answered with a 4xx in the surface's envelope, never a 500, on every route of /api/v1 (enumerated
 * from the OpenAPI document), /agent/v1 and /v1. Whatever the requests carried never reaches a log line.
 */

/** Marks every hostile value, so that a log line that repeats one is found. */
const MARK = 'mark7f3a';
const NUL = `${MARK}\u0000nul`;
const LONG = `${MARK}${'x'.repeat(5_000)}`;
/** Past int4 (the columns' type), past 2^53, below int4, and a double no column holds. */
const OVERFLOWS = [2 ** 31, 2 ** 53 + 2, -(2 ** 31) - 1, 1e300];

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Leaf = { path: Array<string | number>; value: Json };

function leaves(value: Json, path: Array<string | number> = []): Leaf[] {
  if (Array.isArray(value)) return value.flatMap((item, i) => leaves(item, [...path, i]));
  if (value !== null && typeof value === 'object') return Object.entries(value).flatMap(([key, item]) => leaves(item, [...path, key]));
  return [{ path, value }];
}

function replaced(value: Json, path: Array<string | number>, leaf: Json): Json {
  if (path.length === 0) return leaf;
  const [head, ...rest] = path;
  if (Array.isArray(value)) return value.map((item, i) => (i === head ? replaced(item, rest, leaf) : item));
  const object = value as Record<string, Json>;
  return { ...object, [head as string]: replaced(object[head as string]!, rest, leaf) };
}

/** A hostile variant of a body: which leaf, what it became, and whether only "not a 500" can be asked of it. */
interface Mutation {
  label: string;
  body: Json;
  /** A value the schema may legitimately accept (an unbounded gauge): it must not fail, but may succeed. */
  lenient: boolean;
}

/** Each string leaf with a NUL byte and overlong, each number past its range, and a NUL in a key. */
function mutations(base: Json, lenient: (path: string) => boolean = () => false): Mutation[] {
  const out: Mutation[] = [];
  for (const { path, value } of leaves(base)) {
    const at = path.join('.') || '(body)';
    if (typeof value === 'string') {
      out.push({ label: `${at} with a NUL byte`, body: replaced(base, path, NUL), lenient: false });
      out.push({ label: `${at} overlong`, body: replaced(base, path, LONG), lenient: lenient(at) });
    } else if (typeof value === 'number') {
      for (const n of OVERFLOWS) out.push({ label: `${at} = ${n}`, body: replaced(base, path, n), lenient: lenient(at) });
    }
  }
  if (base !== null && typeof base === 'object' && !Array.isArray(base))
    out.push({ label: 'a key with a NUL byte', body: { ...base, [NUL]: 1 }, lenient: false });
  return out;
}

/** What a route answered that it should not have, for one readable failure per route. */
type Problem = string;

async function checkAnswer(response: Response, opts: { label: string; surface: 'api' | 'openai'; strict: boolean; exactly?: number }): Promise<Problem | null> {
  const text = await response.text();
  const { status } = response;
  if (status >= 500) return `${opts.label}: ${status} ${text.slice(0, 200)}`;
  if (opts.exactly !== undefined && status !== opts.exactly) return `${opts.label}: ${status}, expected ${opts.exactly} (${text.slice(0, 200)})`;
  if (status < 400) return opts.strict ? `${opts.label}: accepted with ${status}` : null;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return `${opts.label}: ${status} without a JSON envelope: ${text.slice(0, 200)}`;
  }
  const envelope = (opts.surface === 'api' ? ErrorEnvelope : OpenAIErrorEnvelope).safeParse(json);
  if (!envelope.success) return `${opts.label}: ${status} outside the envelope: ${text.slice(0, 200)}`;
  if (opts.surface === 'api' && (json as { error: { requestId: string } }).error.requestId !== response.headers.get('x-request-id')) {
    return `${opts.label}: envelope requestId differs from X-Request-Id`;
  }
  if (text.includes(MARK)) return `${opts.label}: the answer repeats the hostile input`;
  return null;
}

/** A minimal instance of a JSON schema of the OpenAPI document, every optional property included (so every leaf is probed). */
function example(schema: Record<string, unknown> | undefined, doc: Record<string, unknown>, depth = 0): Json {
  if (!schema || depth > 10) return null;
  if (typeof schema.$ref === 'string') {
    const target = schema.$ref
      .slice(2)
      .split('/')
      .reduce<unknown>((node, key) => (node as Record<string, unknown>)?.[key], doc) as Record<string, unknown>;
    return example(target, doc, depth + 1);
  }
  if ('const' in schema) return schema.const as Json;
  if (Array.isArray(schema.enum)) return schema.enum[0] as Json;
  const union = (schema.anyOf ?? schema.oneOf) as Array<Record<string, unknown>> | undefined;
  if (union) return example(union.find((s) => s.type !== 'null') ?? union[0], doc, depth + 1);
  const type = Array.isArray(schema.type) ? (schema.type as string[]).find((t) => t !== 'null') : schema.type;
  switch (type) {
    case 'object': {
      const out: Record<string, Json> = {};
      for (const [key, property] of Object.entries((schema.properties ?? {}) as Record<string, Record<string, unknown>>))
        out[key] = example(property, doc, depth + 1);
      return out;
    }
    case 'array':
      return Array.from({ length: Math.max(1, Number(schema.minItems ?? 1)) }, () => example(schema.items as Record<string, unknown>, doc, depth + 1));
    case 'string':
      return 'a'.repeat(Math.max(1, Number(schema.minLength ?? 1)));
    case 'integer':
    case 'number':
      return Math.max(1, Number(schema.minimum ?? 1));
    case 'boolean':
      return false;
    default:
      return null;
  }
}

/** Known-valid bodies of the management routes, so that hostile leaves reach the service and the store. */
const API_FIXTURES: Record<string, Json> = {
  'POST /enrollment-tokens': { name: 'bounds-node', labels: { site: 'lab' }, ttlSeconds: 60 },
  'POST /machines/{id}/revoke': { reason: 'bounds' },
  'PUT /deployments/{name}': {
    model: 'bounds-model',
    runtime: { kind: 'simulated', model: 'bounds-model', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
    replicas: 0,
    selector: { pool: 'bounds' },
    gpus: 0,
    memoryMiB: 64,
    maxConcurrency: 4,
    queueCapacity: 8,
  },
  'PUT /swarms/{name}': {
    name: 'bounds-dep',
    deployment: {
      name: 'bounds-swarm-dep',
      model: 'bounds-swarm-model',
      runtime: { kind: 'simulated', model: 'bounds-swarm-model', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
      replicas: 0,
      selector: { pool: 'bounds' },
    },
    jobs: { backend: 'local', concurrency: 4, maxAttempts: 2 },
  },
  // Registered once before the walk (as version `x` of model `bounds-dep`, the path values below), so that a
  // variant that is still valid (a 2 GiB file is a legitimate size) reaches the store and is refused as a taken
  // label, 409, rather than stored.
  'POST /models/{name}/versions': { version: 'x', format: 'other', manifest: { files: [{ path: 'weights/model.bin', size: 1, sha256: 'a'.repeat(64) }] } },
};

/** Plausible values of path parameters: well-formed, naming nothing. */
const PATH_VALUES: Record<string, string> = { id: 'mch_01J0000000000000000000000', assignmentId: 'asg_01J0000000000000000000000', name: 'bounds-dep' };

describe('every route bounds what it is sent', () => {
  let plane: TestPlane;
  let m: TestMachine;
  let doc: Record<string, unknown>;
  const logLines: string[] = [];

  beforeAll(async () => {
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logLines.push(chunk.toString('utf8'));
        done();
      },
    });
    plane = await startTestPlane({
      store: 'pglite',
      logger: pino({ level: 'debug' }, sink),
      config: { heartbeatIntervalMs: 10_000, runtimeGraceMs: 10_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000 },
    });
    m = await enrollTestMachine(plane, 'bounds-m');
    doc = (await (await plane.admin('/api/v1/openapi.json')).json()) as Record<string, unknown>;
    for (const [path, body] of [
      ['/api/v1/models', { name: PATH_VALUES.name }],
      [`/api/v1/models/${PATH_VALUES.name}/versions`, API_FIXTURES['POST /models/{name}/versions']],
    ] as const) {
      expect((await plane.admin(path, { method: 'POST', body: JSON.stringify(body) })).status).toBe(201);
    }
  });
  afterAll(async () => {
    await plane?.stop();
  });

  /** Query parameters whose values are names, which twenty digits or `1e309` can be. */
  const NAME_QUERIES = new Set(['target']);

  const api = (method: string, path: string, body?: Json, query = '') =>
    plane.admin(`/api/v1${path}${query}`, {
      method,
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
    });

  it('/api/v1: every route of the OpenAPI document', async () => {
    const paths = doc.paths as Record<
      string,
      Record<string, { parameters?: Array<{ name: string; in: string }>; requestBody?: { content: Record<string, { schema: Record<string, unknown> }> } }>
    >;
    const problems: Problem[] = [];
    let routes = 0;
    for (const [template, operations] of Object.entries(paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        routes += 1;
        const verb = method.toUpperCase();
        const route = `${verb} ${template}`;
        const params = (operation.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);
        const queries = (operation.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name);
        const fill = (over: Record<string, string> = {}) => template.replace(/\{(\w+)\}/g, (_, name: string) => over[name] ?? PATH_VALUES[name] ?? 'x');
        const schema = operation.requestBody?.content['application/json']?.schema;
        const base: Json | undefined = schema ? (API_FIXTURES[route] ?? example(schema, doc)) : undefined;
        const body = base ?? undefined;

        for (const name of params) {
          for (const [what, value, exactly] of [
            ['a NUL byte', encodeURIComponent(NUL), 400],
            ['overlong', LONG, undefined],
            ['an integer past 2^64', '99999999999999999999', undefined],
          ] as const) {
            // Twenty digits are a valid name (of a deployment, a secret): that one must not fail, and may succeed.
            const strict = what !== 'an integer past 2^64';
            const problem = await checkAnswer(await api(verb, fill({ [name]: value }), body), {
              label: `${route} with {${name}} ${what}`,
              surface: 'api',
              strict,
              exactly,
            });
            if (problem) problems.push(problem);
          }
        }
        for (const name of [...queries, 'unknown']) {
          for (const [what, value, exactly] of [
            ['a NUL byte', encodeURIComponent(NUL), 400],
            ['overlong', LONG, undefined],
            ['an integer past 2^64', '99999999999999999999', undefined],
            ['1e309', '1e309', undefined],
          ] as const) {
            // An unknown query parameter is ignored (2xx allowed) unless it carries a NUL byte; a name-valued one
            // (the audit log's `target`: template and secret names too) may be all digits.
            const strict = (name !== 'unknown' && !(NAME_QUERIES.has(name) && what !== 'overlong')) || what === 'a NUL byte';
            const problem = await checkAnswer(await api(verb, fill(), body, `?${name}=${value}`), {
              label: `${route} with ?${name} ${what}`,
              surface: 'api',
              strict,
              exactly,
            });
            if (problem) problems.push(problem);
          }
        }
        if (base !== undefined) {
          for (const mutation of mutations(base)) {
            const exactly = mutation.label.includes('NUL') ? 400 : undefined;
            const problem = await checkAnswer(await api(verb, fill(), mutation.body), {
              label: `${route} body ${mutation.label}`,
              surface: 'api',
              strict: !mutation.lenient,
              exactly,
            });
            if (problem) problems.push(problem);
          }
        }
      }
    }
    expect(routes).toBeGreaterThanOrEqual(10);
    expect(problems).toEqual([]);
  });

  describe('/agent/v1', () => {
    let seq = 100;
    const signed = async (machine: TestMachine, method: string, path: string, body: Json | undefined, headers: Record<string, string> = {}) => {
      const text = body === undefined ? '' : JSON.stringify(body);
      return await fetch(`${plane.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${await machine.sign(method, path, text)}`, 'content-type': 'application/json', ...headers },
        body: method === 'GET' ? undefined : text,
      });
    };

    it('POST /agent/v1/enroll', async () => {
      const key = await generateMachineKey();
      const problems: Problem[] = [];
      for (const mutation of mutations({
        token: 'lnxe_not-a-real-token-for-bounds',
        name: 'bounds-enroll',
        publicKey: key.publicJwk,
        inventory: TEST_INVENTORY as unknown as Json,
        labels: {},
      })) {
        // A real, unused token each time, so that a hostile leaf reaches the enrollment transaction.
        const token = await createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, labels: {}, ttlSeconds: 60 } });
        const body = mutation.label.startsWith('token') ? mutation.body : { ...(mutation.body as Record<string, Json>), token: token.token };
        const response = await fetch(`${plane.url}/agent/v1/enroll`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        // Inventory gauges are numbers a node reports as it measures them: a huge one is a value, not a fault.
        const lenient = mutation.lenient || /^inventory\.(memory|disk|cpus)/.test(mutation.label);
        const problem = await checkAnswer(response, {
          label: `enroll ${mutation.label}`,
          surface: 'api',
          strict: !lenient,
          exactly: mutation.label.includes('NUL') ? 400 : undefined,
        });
        if (problem) problems.push(problem);
      }
      expect(problems).toEqual([]);
    });

    it('POST /agent/v1/heartbeat', async () => {
      const problems: Problem[] = [];
      const bases: Array<(n: number) => Json> = [
        (n) => heartbeatBody(m, n, { bootId: `boot-bounds-${n}`, metrics: { load1: 0.5 }, warmModels: ['sim-chat'] }) as Json,
        (n) =>
          heartbeatBody(m, n, {
            bootId: `boot-bounds-${n}`,
            runtimes: [
              runtimeReport('asg_01J0000000000000000000000', 'dep_01J0000000000000000000000', { message: 'ok', progress: { elapsedMs: 1, timeoutMs: 2 } }),
            ],
          }) as Json,
      ];
      for (const base of bases) {
        for (const mutation of mutations(base(0), (at) => at.startsWith('metrics.'))) {
          const n = ++seq;
          // A fresh boot and sequence each time, so that the hostile leaf is the only thing wrong.
          let body = mutation.body as Record<string, Json>;
          if (!mutation.label.startsWith('seq')) body = { ...body, seq: n };
          if (!mutation.label.startsWith('bootId')) body = { ...body, bootId: `boot-bounds-${n}` };
          const problem = await checkAnswer(await signed(m, 'POST', '/agent/v1/heartbeat', body), {
            label: `heartbeat ${mutation.label}`,
            surface: 'api',
            strict: !mutation.lenient,
            exactly: mutation.label.includes('NUL') ? 400 : undefined,
          });
          if (problem) problems.push(problem);
        }
      }
      expect(problems).toEqual([]);
    });

    it('POST /agent/v1/credentials, POST /agent/v1/runtimes/{assignmentId}/logs, GET /agent/v1/stream, frames, jwks', async () => {
      const problems: Problem[] = [];
      const next = await generateMachineKey();
      for (const mutation of mutations({ publicKey: next.publicJwk })) {
        const problem = await checkAnswer(await signed(m, 'POST', '/agent/v1/credentials', mutation.body), {
          label: `credentials ${mutation.label}`,
          surface: 'api',
          strict: true,
        });
        if (problem) problems.push(problem);
      }
      const logs = '/agent/v1/runtimes/asg_01J0000000000000000000000/logs';
      for (const mutation of mutations({ requestId: 'req-1', lines: ['one line'] })) {
        const problem = await checkAnswer(await signed(m, 'POST', logs, mutation.body), { label: `logs ${mutation.label}`, surface: 'api', strict: true });
        if (problem) problems.push(problem);
      }
      for (const [what, value] of [
        ['a NUL byte', encodeURIComponent(NUL)],
        ['overlong', LONG],
      ]) {
        for (const path of [`/agent/v1/runtimes/${value}/logs`, `/agent/v1/invocations/${value}/frames`]) {
          for (const method of ['GET', 'POST']) {
            if (method === 'GET' && path.endsWith('/logs')) continue;
            const problem = await checkAnswer(await signed(m, method, path, method === 'POST' ? { requestId: 'r', lines: [] } : undefined), {
              label: `${method} ${path.slice(0, 40)}… with ${what}`,
              surface: 'api',
              strict: true,
              exactly: what === 'a NUL byte' ? 400 : undefined,
            });
            if (problem) problems.push(problem);
          }
        }
      }
      for (const lastEventId of ['desired-99999999999999999999', `desired-${'9'.repeat(5_000)}`, LONG]) {
        const problem = await checkAnswer(await signed(m, 'GET', '/agent/v1/stream', undefined, { 'last-event-id': lastEventId }), {
          label: `stream with Last-Event-ID ${lastEventId.slice(0, 30)}`,
          surface: 'api',
          strict: true,
        });
        if (problem) problems.push(problem);
      }
      const problem = await checkAnswer(await fetch(`${plane.url}/agent/v1/jwks?x=${encodeURIComponent(NUL)}`), {
        label: 'jwks with a NUL query',
        surface: 'api',
        strict: true,
        exactly: 400,
      });
      if (problem) problems.push(problem);
      expect(problems).toEqual([]);
    });

    it('answers a machine JWT whose kid carries a NUL byte with 401, without credentials and without reaching the store', async () => {
      const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
      const body = JSON.stringify(heartbeatBody(m, ++seq));
      for (const kid of [`crd_${NUL}`, LONG, `crd_${'\u0001'}`]) {
        const token = `${b64({ alg: 'EdDSA', kid })}.${b64({ iss: m.machineId, sub: m.machineId })}.${Buffer.alloc(64).toString('base64url')}`;
        const response = await fetch(`${plane.url}/agent/v1/heartbeat`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body,
        });
        const problem = await checkAnswer(response, { label: `kid ${JSON.stringify(kid.slice(0, 20))}`, surface: 'api', strict: true, exactly: 401 });
        expect(problem).toBeNull();
      }
      // The same on the streamed (frames) verifier, which caches credentials.
      const token = `${b64({ alg: 'EdDSA', kid: `crd_${NUL}` })}.${b64({})}.${Buffer.alloc(64).toString('base64url')}`;
      const frames = await fetch(`${plane.url}/agent/v1/invocations/inv_x/frames`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: '\n',
      });
      expect(await checkAnswer(frames, { label: 'frames kid NUL', surface: 'api', strict: true, exactly: 401 })).toBeNull();
    });

    it("answers a correctly signed JWT whose jti carries a NUL byte (or is overlong) with 401, not the store's error", async () => {
      for (const jti of [NUL, LONG]) {
        const body = JSON.stringify(heartbeatBody(m, ++seq, { bootId: `boot-bounds-jti-${seq}` }));
        const jwt = await new SignJWT({ htm: 'POST', htp: '/agent/v1/heartbeat', bdh: await sha256Base64Url(body) })
          .setProtectedHeader({ alg: 'EdDSA', kid: m.credentialId })
          .setIssuer(m.machineId)
          .setSubject(m.machineId)
          .setAudience(m.clusterId)
          .setIssuedAt()
          .setExpirationTime('30s')
          .setJti(jti)
          .sign(m.key);
        const response = await fetch(`${plane.url}/agent/v1/heartbeat`, {
          method: 'POST',
          headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
          body,
        });
        expect(await checkAnswer(response, { label: `jti ${jti.slice(0, 12)}`, surface: 'api', strict: true, exactly: 401 })).toBeNull();
      }
    });
  });

  it('/v1: every inference route and its headers', async () => {
    const problems: Problem[] = [];
    const post = (path: string, body: Json, headers: Record<string, string> = {}) =>
      fetch(`${plane.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const bodies: Array<[string, Json]> = [
      ['/v1/chat/completions', { model: 'bounds-nowhere', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, timeout: 30, user: 'u' }],
      ['/v1/completions', { model: 'bounds-nowhere', prompt: 'hi', max_tokens: 4, seed: 1 }],
      ['/v1/embeddings', { model: 'bounds-nowhere', input: 'hi', dimensions: 8 }],
    ];
    for (const [path, base] of bodies) {
      for (const mutation of mutations(base)) {
        const problem = await checkAnswer(await post(path, mutation.body), {
          label: `${path} ${mutation.label}`,
          surface: 'openai',
          strict: !mutation.lenient,
        });
        if (problem) problems.push(problem);
      }
      for (const [header, value] of [
        ['x-lunanexa-deadline', '99999999999999999999'],
        ['x-lunanexa-deadline', String(2 ** 53 + 2)],
        ['x-lunanexa-deadline', 'Infinity'],
        ['x-lunanexa-deadline', '+275760-09-13T00:00:00.001Z'],
        ['x-lunanexa-deadline', LONG],
        ['idempotency-key', LONG],
      ] as const) {
        const problem = await checkAnswer(await post(path, base, { [header]: value }), {
          label: `${path} ${header}: ${value.slice(0, 24)}`,
          surface: 'openai',
          strict: true,
          exactly: 400,
        });
        if (problem) problems.push(problem);
      }
      const problem = await checkAnswer(await post(`${path}?x=${encodeURIComponent(NUL)}`, base), {
        label: `${path} with a NUL query`,
        surface: 'openai',
        strict: true,
        exactly: 400,
      });
      if (problem) problems.push(problem);
    }
    const models = await fetch(`${plane.url}/v1/models?x=${encodeURIComponent(NUL)}`, { headers: { authorization: `Bearer ${plane.adminToken}` } });
    const problem = await checkAnswer(models, { label: '/v1/models with a NUL query', surface: 'openai', strict: true, exactly: 400 });
    if (problem) problems.push(problem);
    expect(problems).toEqual([]);
  });

  it('/v1/files: every form field, query parameter and path parameter', async () => {
    const problems: Problem[] = [];
    const authorization = `Bearer ${plane.adminToken}`;
    const upload = (purpose: string, filename: string) => {
      const form = new FormData();
      form.append('purpose', purpose);
      form.append('file', new Blob(['{"a":1}\n']), filename);
      return fetch(`${plane.url}/v1/files`, { method: 'POST', headers: { authorization }, body: form });
    };
    const answers: Array<[string, Promise<Response>]> = [
      ['purpose with a NUL byte', upload(NUL, 'rows.jsonl')],
      ['purpose overlong', upload(LONG, 'rows.jsonl')],
      ['file name with a NUL byte', upload('batch', NUL)],
      ['file name overlong', upload('batch', LONG)],
    ];
    for (const query of [`purpose=${NUL}`, `after=${LONG}`, `order=${LONG}`, ...OVERFLOWS.map((n) => `limit=${n}`)]) {
      answers.push([
        `list ?${query.slice(0, 24)}`,
        fetch(`${plane.url}/v1/files?${query.replace(NUL, encodeURIComponent(NUL))}`, { headers: { authorization } }),
      ]);
    }
    for (const id of [NUL, LONG, `file_${MARK}`]) {
      for (const [method, suffix] of [
        ['GET', ''],
        ['GET', '/content'],
        ['DELETE', ''],
      ] as const) {
        answers.push([
          `${method} /v1/files/{${id.slice(0, 12)}}${suffix}`,
          fetch(`${plane.url}/v1/files/${encodeURIComponent(id)}${suffix}`, { method, headers: { authorization } }),
        ]);
      }
    }
    for (const [label, answer] of answers) {
      const problem = await checkAnswer(await answer, { label: `/v1/files ${label}`, surface: 'openai', strict: true });
      if (problem) problems.push(problem);
    }
    expect(problems).toEqual([]);
  });

  it('never wrote a hostile value, a query parameter or an unhandled error to the log', () => {
    expect(logLines.length).toBeGreaterThan(0);
    expect(logLines.filter((line) => line.includes(MARK))).toEqual([]);
    expect(logLines.filter((line) => /unhandled|"level":50/.test(line))).toEqual([]);
  });
});
