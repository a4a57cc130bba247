import { Agent, Client, request, type Dispatcher } from 'undici';

export interface RuntimeRequest {
  method?: Dispatcher.HttpMethod;
  headers?: Record<string, string>;
  /** A string, never a stream: a request retried on another connection sends it again. */
  body?: string;
  signal?: AbortSignal;
}

/** How a kept-alive connection fails when the runtime closed it as idle while a request was on its way. */
const CONNECTION_LOST = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET']);

/**
 * The agent's HTTP client for its runtimes on loopback: never through the link's proxy, and with connections kept
 * alive. A runtime drops a connection idle for its own timeout (uvicorn, thus vLLM, and Node: 5 s), mostly without
 * a `Keep-Alive: timeout=` hint to go by, and a request sent as it does fails without ever reaching it.
 */
export class RuntimeHttp {
  // Below the runtimes' 5 s, so the agent lets an idle connection go before a runtime closes it under a request.
  private readonly pool = new Agent({ keepAliveTimeout: 4_000 });

  /**
   * A request whose connection broke before any answer is sent once more: a runtime with a shorter timeout, or one
   * too busy to read the request before its idle timer fired, closed the connection without handling it. Never
   * after an answer began (the runtime handled it), nor when the caller gave up.
   */
  async request(url: string, init: RuntimeRequest = {}): Promise<Dispatcher.ResponseData> {
    try {
      return await request(url, { ...init, dispatcher: this.pool });
    } catch (error) {
      if (init.signal?.aborted || !CONNECTION_LOST.has((error as { code?: string }).code ?? '')) throw error;
      // The other idle connections in the pool went quiet at about the same time and may be closing too.
      const fresh = new Client(new URL(url).origin);
      try {
        return await request(url, { ...init, dispatcher: fresh });
      } finally {
        // Takes effect once the answer is read to its end or its reading aborted: a streamed answer is not cut short.
        void fresh.close();
      }
    }
  }
}
