import canonicalizeJson from 'canonicalize';

const encoder = new TextEncoder();

/** RFC 8785 canonical JSON of a value. */
export function canonicalize(value: unknown): string {
  const text = canonicalizeJson(value);
  if (text === undefined) throw new TypeError('value cannot be canonicalised');
  return text;
}

/** SHA-256 of bytes (or a UTF-8 string) as base64url without padding. */
export async function sha256Base64Url(data: string | Uint8Array): Promise<string> {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data;
  const digest = await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>);
  return Buffer.from(digest).toString('base64url');
}

/** SHA-256 of bytes (or a UTF-8 string) as lowercase hex. */
export async function sha256Hex(data: string | Uint8Array): Promise<string> {
  const bytes = typeof data === 'string' ? encoder.encode(data) : data;
  const digest = await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>);
  return Buffer.from(digest).toString('hex');
}
