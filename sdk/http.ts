/**
 * Where the SDK finds the control plane: `url` (its origin, as `lunanexa login` takes it) and an API token, else
 * LUNANEXA_URL and LUNANEXA_TOKEN. `fetch` defaults to the global one (Node 20's).
 */
export interface ConnectionOptions {
  url?: string;
  token?: string;
  fetch?: typeof fetch;
}

/**
 * A refusal of the control plane: its HTTP status, and the error envelope's code and message (the management API's
 * `{error: {code, message, requestId}}` or OpenAI's `{error: {message, type, code}}` on `/v1`).
 */
export class LunaNexaError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null,
    readonly requestId: string | null = null,
  ) {
    super(message);
    this.name = 'LunaNexaError';
  }
}

/** The control plane at one URL with one token: JSON in and out, refusals as `LunaNexaError`. */
export class Http {
  readonly url: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;

  constructor(options: ConnectionOptions = {}) {
    const url = options.url ?? process.env.LUNANEXA_URL;
    const token = options.token ?? process.env.LUNANEXA_TOKEN;
    if (!url) throw new Error('no control plane URL: pass { url } or set LUNANEXA_URL');
    if (!URL.canParse(url)) throw new Error(`not a URL: ${url}`);
    if (!token) throw new Error('no API token: pass { token } or set LUNANEXA_TOKEN');
    this.url = url;
    this.#token = token;
    this.#fetch = options.fetch ?? fetch;
  }

  /** `path` (absolute, `/api/v1/...` or `/v1/...`, or a URL) against the plane's URL. */
  resolve(path: string): string {
    return new URL(path, this.url).href;
  }

  /** A request with the token; a status that is not 2xx is thrown as `LunaNexaError`. */
  async request(method: string, path: string, init: { json?: unknown; body?: BodyInit; signal?: AbortSignal } = {}): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}` };
    if (init.json !== undefined) headers['content-type'] = 'application/json';
    const response = await this.#fetch(this.resolve(path), {
      method,
      headers,
      body: init.json !== undefined ? JSON.stringify(init.json) : init.body,
      signal: init.signal,
    });
    if (!response.ok) throw await refusal(method, path, response);
    return response;
  }

  /** A request whose answer is JSON, returned as `T` (the contract's type: the plane's answer is not re-checked here). */
  async json<T>(method: string, path: string, init: { json?: unknown; body?: BodyInit; signal?: AbortSignal } = {}): Promise<T> {
    return (await (await this.request(method, path, init)).json()) as T;
  }
}

async function refusal(method: string, path: string, response: Response): Promise<LunaNexaError> {
  const text = await response.text().catch(() => '');
  let code: string | null = null;
  let message = text.slice(0, 300);
  let requestId: string | null = response.headers.get('x-request-id');
  try {
    const envelope = JSON.parse(text) as { error?: { code?: string | null; message?: string; requestId?: string } };
    code = envelope.error?.code ?? null;
    message = envelope.error?.message ?? message;
    requestId = envelope.error?.requestId ?? requestId;
  } catch {
    // Not an envelope (a proxy's page): its first bytes are the message.
  }
  return new LunaNexaError(`${method} ${path}: HTTP ${response.status}${code ? ` ${code}` : ''}: ${message}`, response.status, code, requestId);
}

/** Sleeps `ms`, or rejects at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
