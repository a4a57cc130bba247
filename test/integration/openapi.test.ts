import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { newApp } from '../../functions/api/app.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { API_TYPES_PATH, apiTypesSource, openApiDocument } from '../../scripts/api-types.js';

type Doc = { openapi: string; paths: Record<string, Record<string, { servers?: Array<{ url: string }>; responses?: Record<string, unknown> }>> };

/** `/api/v1/machines/:id` as the document writes it: relative to its server, `{id}` for parameters. */
function documented(path: string): string {
  const openapi = path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
  return openapi.startsWith('/api/v1/') ? openapi.slice('/api/v1'.length) : openapi;
}

describe('the OpenAPI document at /api/v1/openapi.json', () => {
  let plane: TestPlane;
  let doc: Doc;

  beforeAll(async () => {
    plane = await startTestPlane();
    const response = await fetch(`${plane.url}/api/v1/openapi.json`);
    expect(response.status).toBe(200);
    doc = (await response.json()) as Doc;
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    const result = await new Validator().validate(doc as unknown as Parameters<Validator['validate']>[0]);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(doc.openapi).toBe('3.1.0');
  });

  it('documents every route the app serves under /api/v1 and /v1, with the method it answers', () => {
    const served = newApp(plane.ports)
      .routes.filter((r) => r.method !== 'ALL' && (r.path.startsWith('/api/v1/') || r.path.startsWith('/v1/')) && r.path !== '/api/v1/openapi.json')
      .map((r) => `${r.method.toLowerCase()} ${documented(r.path)}`);
    const listed = new Set(
      Object.entries(doc.paths).flatMap(([path, ops]) =>
        Object.keys(ops)
          .filter((k) => k !== 'servers')
          .map((method) => `${method} ${path}`),
      ),
    );
    expect(served.length).toBeGreaterThan(20);
    expect(served.filter((route) => !listed.has(route))).toEqual([]);
    // And nothing documented that is not served.
    expect([...listed].filter((route) => !served.includes(route))).toEqual([]);
  });

  it('places the /v1 surface under its own server, and gives every operation its error responses', () => {
    for (const path of ['/v1/models', '/v1/chat/completions', '/v1/completions', '/v1/embeddings']) {
      const ops = doc.paths[path];
      expect(ops, path).toBeDefined();
      for (const op of Object.values(ops!)) expect(op.servers).toEqual([{ url: '/' }]);
    }
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) expect(Object.keys(op.responses ?? {}), `${method} ${path}`).toContain('401');
    }
  });

  it("is what `npm run api:types` builds from the app's own code, and the committed client types are not stale", async () => {
    expect(await openApiDocument()).toEqual(doc);
    const generated = await apiTypesSource(doc as unknown as Parameters<typeof apiTypesSource>[0]);
    const committed = await readFile(API_TYPES_PATH, 'utf8');
    const [was, is] = [committed.split('\n'), generated.split('\n')];
    const firstDifference = Array.from({ length: Math.max(was.length, is.length) }, (_, i) => i).find((i) => was[i] !== is[i])! + 1;
    expect(generated === committed, `shared/api/openapi.d.ts is stale from line ${firstDifference}: run \`npm run api:types\``).toBe(true);
  });

  it('serves the typed client (shared/api/client.ts) the answers its types promise', async () => {
    const { data, error, response } = await plane.api.GET('/machines', { params: { query: { limit: 1 } } });
    expect(response.status).toBe(200);
    expect(error).toBeUndefined();
    expect(data?.data).toEqual([]);
    expect(data?.nextCursor).toBeNull();
    const refused = await plane.api.GET('/machines/{id}', { params: { path: { id: 'mch_00000000000000000000000000' } } });
    expect(refused.response.status).toBe(404);
    expect(refused.error?.error.code).toBeTypeOf('string');
  });
});
