/**
 * Why a request never reached the control plane, in words an operator can act on. undici's fetch rejects with
 * a bare `TypeError: fetch failed` and keeps the reason in `cause` (a system error such as ECONNREFUSED, a TLS
 * verification error, an undici timeout); an aborted signal rejects with the signal's reason instead.
 */

const REASONS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'DNS lookup failed',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ETIMEDOUT: 'connection timed out',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  UND_ERR_HEADERS_TIMEOUT: 'no response in time',
  UND_ERR_BODY_TIMEOUT: 'response stalled',
  UND_ERR_SOCKET: 'connection closed by the other side',
  EPROTO: 'TLS handshake failed',
  CERT_HAS_EXPIRED: 'its TLS certificate has expired',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'its TLS certificate is self-signed',
  SELF_SIGNED_CERT_IN_CHAIN: 'its TLS certificate chain holds a self-signed certificate (set NODE_EXTRA_CA_CERTS to trust a private CA)',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'the issuer of its TLS certificate is not trusted (set NODE_EXTRA_CA_CERTS to trust a private CA)',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'its TLS certificate cannot be verified (set NODE_EXTRA_CA_CERTS to trust a private CA)',
  ERR_TLS_CERT_ALTNAME_INVALID: 'its TLS certificate does not name this host',
};

interface ErrorLike {
  name?: unknown;
  code?: unknown;
  message?: unknown;
  cause?: unknown;
}

const asErrorLike = (value: unknown): ErrorLike | undefined => (typeof value === 'object' && value !== null ? (value as ErrorLike) : undefined);

/** The innermost error in the `cause` chain that carries a code, or else the innermost one. */
function rootCause(error: unknown): ErrorLike | undefined {
  let innermost: ErrorLike | undefined;
  let coded: ErrorLike | undefined;
  const seen = new Set<unknown>();
  for (let current = asErrorLike(error); current && !seen.has(current); current = asErrorLike(current.cause)) {
    seen.add(current);
    innermost = current;
    if (typeof current.code === 'string') coded = current;
  }
  return coded ?? innermost;
}

/**
 * Describes a failed request to the control plane at `url`.
 *
 * @example
 * await fetch(url).catch((error) => { throw new Error(unreachableMessage(url, error), { cause: error }); });
 * // cannot reach the control plane at https://lunanexa.example: connection refused (ECONNREFUSED)
 */
export function unreachableMessage(url: string | URL, error: unknown): string {
  const prefix = `cannot reach the control plane at ${String(url)}`;
  const cause = rootCause(error);
  // AbortSignal.timeout() rejects with a DOMException named TimeoutError; its numeric code names nothing useful.
  if (cause?.name === 'TimeoutError') return `${prefix}: no response in time`;
  const code = typeof cause?.code === 'string' ? cause.code : undefined;
  const message = typeof cause?.message === 'string' && cause.message.length > 0 ? cause.message : String(error);
  if (code && REASONS[code]) return `${prefix}: ${REASONS[code]} (${code})`;
  return code ? `${prefix}: ${message} (${code})` : `${prefix}: ${message}`;
}
