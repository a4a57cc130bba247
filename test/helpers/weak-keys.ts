/**
 * Ed25519 public keys that must be refused. The eight points of small order on edwards25519 (canonical
 * encodings; libsodium's blocklist and the signs): with one of them as a public key anyone can forge a signature
 * that node:crypto verifies (R = the key, S = 0). Then encodings that are not canonical (y >= p, and x = 0 with
 * the sign bit set).
 */
export const SMALL_ORDER_KEYS = [
  '0100000000000000000000000000000000000000000000000000000000000000',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0000000000000000000000000000000000000000000000000000000000000080',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
];
export const NON_CANONICAL_KEYS = [
  'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff',
  '0100000000000000000000000000000000000000000000000000000000000080',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff',
];
/** A hex-encoded public key as the JWK an agent sends. */
export const weakJwk = (hex: string) => ({ kty: 'OKP' as const, crv: 'Ed25519' as const, x: Buffer.from(hex, 'hex').toString('base64url') });
