import { sha256Hex } from '../../shared/canonical.js';

/** A new high-entropy secret with a recognisable prefix (so leaked tokens can be found by scanners). */
export function newSecret(prefix: 'lnx' | 'lnxe'): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return `${prefix}_${Buffer.from(bytes).toString('base64url')}`;
}

/** How secrets are stored: SHA-256 is enough for 256-bit random secrets (no dictionary to attack). */
export async function hashSecret(secret: string): Promise<string> {
  return await sha256Hex(secret);
}
