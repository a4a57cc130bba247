import { asc, isNull } from 'drizzle-orm';
import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';
import { signingKeys } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { Jwks } from '../../shared/contracts/enrollment.js';

export interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  /**
   * The peer channel's HMAC key (functions/link/peer-auth.ts), derived from the private key: only the instances,
   * which read that from the store, can derive it; agents pin the public half only.
   */
  peerKey: Uint8Array;
}

/** HKDF-SHA256 of the private key's scalar, salted with its kid: a key for one purpose, not the signing key itself. */
async function derivePeerKey(kid: string, privateJwk: JWK): Promise<Uint8Array> {
  const secret = await crypto.subtle.importKey('raw', Buffer.from(privateJwk.d!, 'base64url'), 'HKDF', false, ['deriveBits']);
  const info = new TextEncoder().encode('lunanexa peer channel v1');
  return new Uint8Array(await crypto.subtle.deriveBits({ name: 'HKDF', hash: 'SHA-256', salt: new TextEncoder().encode(kid), info }, secret, 256));
}

/**
 * The control plane's desired-state signing key. Generated on first start and kept in the store; when two
 * instances race on an empty store both insert, and everyone signs with the oldest key.
 */
export async function loadSigningKey(db: Db): Promise<SigningKey> {
  let rows = await db.select().from(signingKeys).where(isNull(signingKeys.retiredAt)).orderBy(asc(signingKeys.createdAt), asc(signingKeys.kid));
  if (rows.length === 0) {
    const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
    const kid = `cpk_${crypto.randomUUID()}`;
    await db
      .insert(signingKeys)
      .values({ kid, publicJwk: await exportJWK(publicKey), privateJwk: await exportJWK(privateKey) })
      .onConflictDoNothing();
    rows = await db.select().from(signingKeys).where(isNull(signingKeys.retiredAt)).orderBy(asc(signingKeys.createdAt), asc(signingKeys.kid));
  }
  const row = rows[0]!;
  return { kid: row.kid, privateKey: (await importJWK(row.privateJwk, 'EdDSA')) as CryptoKey, peerKey: await derivePeerKey(row.kid, row.privateJwk) };
}

/** The public keys agents pin at enrollment. */
export async function loadJwks(db: Db): Promise<Jwks> {
  const rows = await db.select({ kid: signingKeys.kid, publicJwk: signingKeys.publicJwk }).from(signingKeys).where(isNull(signingKeys.retiredAt));
  return {
    keys: rows.map((row) => {
      const { kty, crv, x } = row.publicJwk as JWK & { kty: string; crv: string; x: string };
      return { kty, crv, x, kid: row.kid, alg: 'EdDSA', use: 'sig' };
    }),
  };
}
