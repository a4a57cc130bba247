import { createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { weakEd25519Key } from '../../functions/services/ed25519-key.js';
import { NON_CANONICAL_KEYS, SMALL_ORDER_KEYS } from '../helpers/weak-keys.js';

/** y = 2: no x satisfies the curve equation. */
const OFF_CURVE = '0200000000000000000000000000000000000000000000000000000000000000';
/** The RFC 8032 test 1 public key plus the order-8 point 26e8...05: on the curve, of order 8L. */
const MIXED_ORDER = '3b5b475c4b82dd1572799fc546f4c6c03e478c6654aa4c7f945b347ea32af60d';

const b64 = (hex: string) => Buffer.from(hex, 'hex').toString('base64url');

describe('Ed25519 public keys a machine may register', () => {
  it('node:crypto alone accepts the identity point, and a forged signature verifies for any message (why the check exists)', () => {
    const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: b64(SMALL_ORDER_KEYS[0]!) }, format: 'jwk' });
    const forged = Buffer.concat([Buffer.from(SMALL_ORDER_KEYS[0]!, 'hex'), Buffer.alloc(32)]);
    let verified = 0;
    for (let i = 0; i < 16; i += 1) if (verify(null, Buffer.from(`any message ${i}`), key, forged)) verified += 1;
    expect(verified).toBe(16);
  });

  it('refuses each of the eight small-order points', () => {
    for (const hex of SMALL_ORDER_KEYS) expect(weakEd25519Key(b64(hex)), hex).toMatch(/small order|non-canonical/);
  });

  it('refuses non-canonical encodings, points off the curve and malformed input', () => {
    for (const hex of NON_CANONICAL_KEYS) expect(weakEd25519Key(b64(hex)), hex).toMatch(/non-canonical/);
    expect(weakEd25519Key(b64(OFF_CURVE))).toMatch(/not a point/);
    expect(weakEd25519Key('too-short')).toMatch(/32 bytes/);
    expect(weakEd25519Key(b64('00'.repeat(33)))).toMatch(/32 bytes/);
  });

  it('refuses a key with a small-order component (not in the prime-order subgroup)', () => {
    expect(weakEd25519Key(b64(MIXED_ORDER))).toMatch(/subgroup/);
  });

  it('accepts the RFC 8032 test keys and keys node:crypto generates', () => {
    for (const hex of [
      'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a',
      '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c',
      'fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025',
    ]) {
      expect(weakEd25519Key(b64(hex)), hex).toBeNull();
    }
    for (let i = 0; i < 50; i += 1) {
      const { publicKey } = generateKeyPairSync('ed25519');
      const { x } = publicKey.export({ format: 'jwk' });
      expect(weakEd25519Key(x!), x).toBeNull();
    }
  });
});
