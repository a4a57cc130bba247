import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Validator } from '@seriousme/openapi-schema-validator';
import { newApp } from '../../functions/api/app.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

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
    const result = await new Validator().validate(doc as unknown as Parameters<Validator["validate"]>[0]);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(doc.openapi).toBe('3.1.0');
  });

  it('documents every route the app serves under /api/v1 and /v1, with the method it answers', () => {
    const served = newApp(plane.ports)
      .routes.filter((r) => r.method !== 'ALL' && (r.path.startsWith('/api/v1/') || r.path.startsWith('/v1/')) && r.path !== '/api/v1/openapi.json')
      .map((r) => `${r.method.toLowerCase()} ${documented(r.path)}`);
    const listed = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).filter((k) => k !== 'servers').map((method) => `${method} ${path}`)));
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
});
