import { createHash } from 'node:crypto';
import canonicalizeJson from 'canonicalize';

/** RFC 8785 canonical JSON of a value. */
export function canonicalize(value: unknown): string {
  const text = canonicalizeJson(value);
  if (text === undefined) throw new TypeError('value cannot be canonicalised');
  return text;
}

// node:crypto rather than WebCrypto: a synchronous hash of a few bytes costs microseconds, while each
// crypto.subtle call is a job round trip, and these run on every request of the hot path (Workers provide
// node:crypto under nodejs_compat). Kept async so callers do not depend on that choice.

/** SHA-256 of bytes (or a UTF-8 string) as base64url without padding. */
export async function sha256Base64Url(data: string | Uint8Array): Promise<string> {
  return createHash('sha256').update(data).digest('base64url');
}

/** SHA-256 of bytes (or a UTF-8 string) as lowercase hex. */
export async function sha256Hex(data: string | Uint8Array): Promise<string> {
  return createHash('sha256').update(data).digest('hex');
}
