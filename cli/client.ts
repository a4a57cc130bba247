import type { Middleware } from 'openapi-fetch';
import type { z } from 'zod';
import { managementClient, type ManagementClient, type PagedPath, type PageItem } from '../shared/api/client.js';
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

/** What a call of the typed client resolves to (openapi-fetch's result, either side). */
interface CallResult {
  data?: unknown;
  response: Response;
}

export interface ApiClient {
  /** The control plane's URL, as the CLI was given it: what a path it answers (a swarm's `/v1`) is relative to. */
  readonly url: string;
  /**
   * The typed management client (shared/api/client.ts): path, parameters, body and answer as the API's OpenAPI
   * document has them. A refusal (any status but 2xx) or a control plane out of reach throws a CliError (exit 1).
   */
  readonly http: ManagementClient;
  /**
   * The JSON answer of a call made with `http`, checked against its contract here too (a control plane of
   * another version may answer otherwise than this CLI's document says). The contract's output must be one the
   * document allows, so that the two cannot drift apart unnoticed.
   */
  answer<R extends CallResult, T extends NonNullable<R['data']>>(call: Promise<R>, contract: z.ZodType<T>): Promise<T>;
  /** The answer of a call made with `http` and `parseAs: 'stream'` (CSV, JSONL), for output that must not be held whole. */
  stream(call: Promise<{ data?: ReadableStream<Uint8Array> | null; response: Response }>): Promise<ReadableStream<Uint8Array>>;
  /** Every item of a paged management list, following `nextCursor` (docs/operations.md, "Lists"). */
  all<P extends PagedPath, T extends PageItem<P>>(path: P, item: z.ZodType<T>): Promise<T[]>;
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

/** The path a message names: the request's, without its query. */
const pathOf = (url: string) => (URL.canParse(url) ? new URL(url).pathname : url.split('?')[0]!);

/** Refusals and an unreachable control plane as the CLI's one-line errors (exit 1). */
function cliErrors(url: string): Middleware {
  return {
    onError({ error }) {
      const reason = error instanceof Error ? ((error.cause as Error | undefined)?.message ?? error.message) : String(error);
      return new CliError(`cannot reach ${url}: ${reason} (is LUNANEXA_URL right?)`, 1);
    },
    async onResponse({ request, response }) {
      if (response.ok) return undefined;
      const message = envelopeMessage(await response.text());
      throw new CliError(`${pathOf(request.url)}: HTTP ${response.status}${message ? `: ${message}` : ''}${HINTS[response.status] ?? ''}`, 1);
    },
  };
}

/** The management API at `url` with `token`. */
export function apiClient(url: string, token: string): ApiClient {
  const http = managementClient(url, token, [cliErrors(url)]);
  const answer = async <R extends CallResult, T extends NonNullable<R['data']>>(call: Promise<R>, contract: z.ZodType<T>): Promise<T> => {
    let result: R;
    try {
      result = await call;
    } catch (error) {
      // A 2xx answer that is not JSON at all (openapi-fetch parses it).
      if (error instanceof SyntaxError) throw new CliError(`the answer is not JSON, as this CLI's contract wants (a different control-plane version?)`, 1);
      throw error;
    }
    const parsed = contract.safeParse(result.data);
    if (!parsed.success)
      throw new CliError(`${pathOf(result.response.url)}: the answer does not match this CLI's contract (a different control-plane version?)`, 1);
    return parsed.data;
  };
  return {
    url,
    http,
    answer,
    async stream(call) {
      const { data, response } = await call;
      if (!data) throw new CliError(`${pathOf(response.url)}: an empty answer`, 1);
      return data;
    },
    async all<P extends PagedPath, T extends PageItem<P>>(path: P, item: z.ZodType<T>): Promise<T[]> {
      const items: T[] = [];
      const pages = pageOf(item) as unknown as z.ZodType<{ data: T[]; nextCursor: string | null }>;
      // Any paged route takes the same query; openapi-fetch cannot check a path that is a type parameter.
      const get = http.GET as unknown as (path: PagedPath, init: { params: { query: { limit: number; cursor?: string } } }) => Promise<CallResult>;
      let cursor: string | null = null;
      do {
        const page: { data: T[]; nextCursor: string | null } = await answer(
          get(path, { params: { query: { limit: 500, ...(cursor ? { cursor } : {}) } } }),
          pages,
        );
        items.push(...page.data);
        cursor = page.nextCursor;
      } while (cursor);
      return items;
    },
  };
}
