import createClient, { type Client, type Middleware } from 'openapi-fetch';
import type { paths } from './openapi.js';

/** The management API's routes (relative to /api/v1) as its OpenAPI document describes them (`npm run api:types`). */
export type ManagementPaths = paths;

/**
 * A typed client of the management API (openapi-fetch): each call's path, path and query parameters, body and
 * answer are those the OpenAPI document gives the route, so a route or a shape that changes fails to typecheck
 * here rather than at run time. JSON answers only (a streamed one is asked for with `parseAs: 'stream'`).
 */
export type ManagementClient = Client<paths, 'application/json'>;

/** The routes that answer GET with a page of a list (`limit`, `cursor`; docs/operations.md, "Lists"). */
export type PagedPath = {
  [P in keyof paths]: paths[P] extends { get: { parameters: { query?: infer Q } } }
    ? [NonNullable<Q>] extends [never]
      ? never
      : 'cursor' extends keyof NonNullable<Q>
        ? P
        : never
    : never;
}[keyof paths];

/** One item of the list a paged route answers. */
export type PageItem<P extends PagedPath> = paths[P] extends { get: { responses: { 200: { content: { 'application/json': { data: Array<infer I> } } } } } }
  ? I
  : never;

/**
 * The management API of the control plane at `url` (its origin: /api/v1 is added), with `token` on every call.
 * `middleware` sees each request and answer (the CLI turns refusals into its one-line errors there).
 */
export function managementClient(url: string | URL, token: string, middleware: Middleware[] = []): ManagementClient {
  const client = createClient<paths, 'application/json'>({ baseUrl: new URL('/api/v1', url).href, headers: { authorization: `Bearer ${token}` } });
  client.use(...middleware);
  return client;
}
