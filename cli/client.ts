import type { z } from 'zod';
import { pageOf } from '../shared/contracts/page.js';

/**
 * Exit codes scripts can rely on (docs/cli.md): 0 done, 1 the API refused or could not be reached, 2 the command
 * was wrong or not configured, 3 a wait (`--wait`) ran out of time, 4 a verification found a problem.
 */
export type ExitCode = 1 | 2 | 3 | 4;

/** A failure the CLI reports in one line and exits on. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: ExitCode,
  ) {
    super(message);
  }
}

export interface RequestOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  body?: unknown;
  accept?: string;
}

export interface ApiClient {
  /** The answer's JSON, checked against its contract. */
  call<T>(path: string, schema: z.ZodType<T>, options?: RequestOptions): Promise<T>;
  /** The answer as a stream of text (CSV, JSONL), for output that must not be held whole. */
  stream(path: string, options?: RequestOptions): Promise<ReadableStream<Uint8Array>>;
  /** Every item of a paged management list, following `nextCursor` (docs/operations.md, "Lists"). */
  all<T>(path: string, item: z.ZodType<T>): Promise<T[]>;
}

function envelopeMessage(text: string): string | undefined {
  try {
    return (JSON.parse(text) as { error?: { message?: string } }).error?.message;
  } catch {
    return undefined;
  }
}

const HINTS: Record<number, string> = {
  401: ' (check LUNANEXA_TOKEN, or run `lunanexa login` again)',
  403: ' (this needs a token with a higher role)',
};

/** The management API at `url` with `token`. */
export function apiClient(url: string, token: string): ApiClient {
  const send = async (path: string, options: RequestOptions): Promise<Response> => {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (options.accept) headers.accept = options.accept;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(new URL(path, url), {
        method: options.method ?? 'GET',
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
      });
    } catch (error) {
      const reason = error instanceof Error ? ((error.cause as Error | undefined)?.message ?? error.message) : String(error);
      throw new CliError(`cannot reach ${url}: ${reason} (is LUNANEXA_URL right?)`, 1);
    }
    if (!response.ok) {
      const message = envelopeMessage(await response.text());
      throw new CliError(`${path.split('?')[0]}: HTTP ${response.status}${message ? `: ${message}` : ''}${HINTS[response.status] ?? ''}`, 1);
    }
    return response;
  };
  const call = async <T>(path: string, schema: z.ZodType<T>, options: RequestOptions = {}): Promise<T> => {
    const response = await send(path, options);
    const text = await response.text();
    const parsed = schema.safeParse(text === '' ? undefined : JSON.parse(text));
    if (!parsed.success) throw new CliError(`${path.split('?')[0]}: the answer does not match this CLI's contract (a different control-plane version?)`, 1);
    return parsed.data;
  };
  return {
    call,
    async stream(path, options = {}) {
      const response = await send(path, options);
      if (!response.body) throw new CliError(`${path}: an empty answer`, 1);
      return response.body;
    },
    async all<T>(path: string, item: z.ZodType<T>): Promise<T[]> {
      const items: T[] = [];
      const pages = pageOf(item) as unknown as z.ZodType<{ data: T[]; nextCursor: string | null }>;
      const joiner = path.includes('?') ? '&' : '?';
      let cursor: string | null = null;
      do {
        const page: { data: T[]; nextCursor: string | null } = await call(`${path}${joiner}limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, pages);
        items.push(...page.data);
        cursor = page.nextCursor;
      } while (cursor);
      return items;
    },
  };
}
