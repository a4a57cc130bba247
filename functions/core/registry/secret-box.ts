import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

/**
 * Runtime secrets at rest: AES-256-GCM under the control plane's secret key (config `secretKey`, base64 of 32
 * bytes). The associated data binds each ciphertext to its workspace and name, so a row copied onto another
 * secret does not decrypt. The key never reaches the store: a copy of the database alone reveals no value.
 */
export interface SecretBox {
  /** Names the key (a digest of it, not the key): stored beside each ciphertext to diagnose a key mismatch. */
  keyId: string;
  seal(plaintext: string, associatedData: string): string;
  /** The plaintext, or null when the ciphertext was not sealed under this key with this associated data. */
  open(sealed: string, associatedData: string): string | null;
}

const VERSION = 'v1';

/** The 32 key bytes of a base64 key, or throws (naming no part of the key). */
export function parseSecretKey(base64: string): Buffer {
  const key = Buffer.from(base64.trim(), 'base64');
  if (key.length !== 32 || key.toString('base64') !== base64.trim()) throw new Error('the secret key must be 32 bytes in base64 (openssl rand -base64 32)');
  return key;
}

/** A fresh key, base64. */
export function newSecretKey(): string {
  return randomBytes(32).toString('base64');
}

export function secretBox(base64Key: string): SecretBox {
  const key = parseSecretKey(base64Key);
  const keyId = createHash('sha256').update('lunanexa-runtime-secret-key\n').update(key).digest('hex').slice(0, 16);
  return {
    keyId,
    seal(plaintext, associatedData) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(Buffer.from(associatedData, 'utf8'));
      const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return [VERSION, iv.toString('base64url'), cipher.getAuthTag().toString('base64url'), ciphertext.toString('base64url')].join('.');
    },
    open(sealed, associatedData) {
      const [version, iv, tag, ciphertext] = sealed.split('.');
      if (version !== VERSION || iv === undefined || tag === undefined || ciphertext === undefined) return null;
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
        decipher.setAAD(Buffer.from(associatedData, 'utf8'));
        decipher.setAuthTag(Buffer.from(tag, 'base64url'));
        return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64url')), decipher.final()]).toString('utf8');
      } catch {
        // Not swallowed: null is the answer for a box that does not open (tampered, or another key); callers refuse it.
        return null;
      }
    },
  };
}

/** What a runtime secret's ciphertext is bound to. */
export function secretAssociatedData(workspaceId: string, name: string): string {
  return `lunanexa-runtime-secret/${workspaceId}/${name}`;
}
