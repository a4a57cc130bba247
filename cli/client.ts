import type { z } from 'zod';
import { pageOf } from '../shared/contracts/page.js';

/** A failure the CLI reports in one line and exits on: the API refused (1), or the invocation was wrong (2). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2,
  ) {
    super(message);
  }
}

export interface ApiClient {
  get<T>(path: string, schema: z.ZodType<T>): Promise<T>;
  /** Every item of a paged management list, following `nextCursor` (docs/operations.md, "Lists"). */
  all<T>(path: string, item: z.ZodType<T>): Promise<T[]>;
}

/** The management API at `url` with `token`, each answer checked against its contract. */
export function apiClient(url: string, token: string): ApiClient {
  const get = async <T>(path: string, schema: z.ZodType<T>): Promise<T> => {
    let response: Response;
    try {
      response = await fetch(new URL(path, url), { headers: { authorization: `Bearer ${token}` } });
    } catch (error) {
      throw new CliError(`cannot reach ${url}: ${error instanceof Error ? (error.cause as Error | undefined)?.message ?? error.message : String(error)} (is LUNANEXA_URL right?)`, 1);
    }
    const text = await response.text();
    if (!response.ok) {
      const message = (() => {
        try {
          return (JSON.parse(text) as { error?: { message?: string } }).error?.message;
        } catch {
          return undefined;
        }
      })();
      const hint = response.status === 401 ? ' (check LUNANEXA_TOKEN)' : '';
      throw new CliError(`${path}: HTTP ${response.status}${message ? `: ${message}` : ''}${hint}`, 1);
    }
    const parsed = schema.safeParse(JSON.parse(text));
    if (!parsed.success) throw new CliError(`${path}: the answer does not match this CLI's contract (a different control-plane version?)`, 1);
    return parsed.data;
  };
  return {
    get,
    async all<T>(path: string, item: z.ZodType<T>): Promise<T[]> {
      const items: T[] = [];
      let cursor: string | null = null;
      do {
        const page: { data: T[]; nextCursor: string | null } = await get(`${path}?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, pageOf(item) as unknown as z.ZodType<{ data: T[]; nextCursor: string | null }>);
        items.push(...page.data);
        cursor = page.nextCursor;
      } while (cursor);
      return items;
    },
  };
}
