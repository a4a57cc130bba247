import { fetch, type Dispatcher, type RequestInit } from 'undici';
import type { CryptoKey } from 'jose';
import type { z } from 'zod';
import { canonicalize } from '../../shared/canonical.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';
import type { ServerClock } from './clock.js';

export type LinkResult<T> = { success: true; data: T } | { success: false; status: number; error: { code: string; message: string } };

function failure(status: number, code: string, message: string): { success: false; status: number; error: { code: string; message: string } } {
  return { success: false, status, error: { code, message } };
}

/** What `readResult` needs of a response: fetch's `Response`, or `undici.request`'s through `fromRequest`. */
export interface ResultSource {
  status: number;
  text(): Promise<string>;
}

/** Adapts an `undici.request` answer for `readResult`. */
export const fromRequest = (response: Dispatcher.ResponseData): ResultSource => ({ status: response.statusCode, text: () => response.body.text() });

/**
 * Reads a response into a `LinkResult`, validating success bodies with `schema`. A redirect is a failure of its
 * own: agent requests never follow one (a signed request or an enrollment token must reach no other server).
 * Never throws.
 */
export async function readResult<S extends z.ZodType>(response: ResultSource, schema: S): Promise<LinkResult<z.output<S>>> {
  const text = await response.text();
  if (response.status >= 300 && response.status < 400) {
    return failure(response.status, 'redirect_refused', `control plane answered ${response.status} (a redirect): agent requests never follow redirects`);
  }
  let json: unknown;
  try {
    json = text.length ? JSON.parse(text) : null;
  } catch {
    return failure(response.status, 'invalid_response', `control plane answered ${response.status} with non-JSON`);
  }
  if (response.status < 200 || response.status > 299) {
    const error = (json as { error?: { code?: string; message?: string } } | null)?.error;
    return failure(response.status, error?.code ?? 'http_error', error?.message ?? `HTTP ${response.status}`);
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) return failure(response.status, 'invalid_response', 'control plane response does not match the contract');
  return { success: true, data: parsed.data };
}

export interface MachineCredentials {
  machineId: string;
  clusterId: string;
  credentialId: string;
  key: CryptoKey;
}

/**
 * The agent's signed HTTP client: every request carries a fresh machine JWT bound to its method, path and
 * body digest, signed in the control plane's time as `clock` knows it (this machine's without one), and every
 * answer's `Date` header is shown to `clock`. Returns results instead of throwing across the network boundary.
 */
export function createSignedClient(opts: {
  baseUrl: string;
  credentials: () => MachineCredentials;
  dispatcher: Dispatcher;
  clock?: Pick<ServerClock, 'now' | 'observeDate'>;
}) {
  async function signedHeaders(method: string, path: string, body: string, extra: Record<string, string> = {}): Promise<Record<string, string>> {
    const creds = opts.credentials();
    const jwt = await signMachineRequest({
      key: creds.key,
      kid: creds.credentialId,
      machineId: creds.machineId,
      clusterId: creds.clusterId,
      method,
      path,
      body,
      nowMs: opts.clock?.now(),
    });
    const headers: Record<string, string> = { authorization: `Bearer ${jwt}`, ...extra };
    if (body.length) headers['content-type'] ??= 'application/json';
    return headers;
  }
  async function signedInit(method: string, path: string, body: string, extra: Record<string, string> = {}): Promise<RequestInit> {
    // Never followed: the signed headers and the body are for this control plane only (see readResult).
    return {
      method,
      headers: await signedHeaders(method, path, body, extra),
      body: body.length ? body : undefined,
      redirect: 'manual',
      dispatcher: opts.dispatcher,
    };
  }
  return {
    signedHeaders,
    /** Sends `payload` as RFC 8785 canonical JSON. */
    async request<S extends z.ZodType>(method: string, path: string, payload: unknown, schema: S, timeoutMs = 10_000): Promise<LinkResult<z.output<S>>> {
      const body = payload === undefined ? '' : canonicalize(payload);
      try {
        const init = await signedInit(method, path, body);
        const sentAt = Date.now();
        const response = await fetch(new URL(path, opts.baseUrl), { ...init, signal: AbortSignal.timeout(timeoutMs) });
        opts.clock?.observeDate(response.headers.get('date'), sentAt, Date.now());
        return await readResult(response, schema);
      } catch (error) {
        return failure(0, 'network_error', error instanceof Error ? error.message : String(error));
      }
    },
  };
}
export type SignedClient = ReturnType<typeof createSignedClient>;
