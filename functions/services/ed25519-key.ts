import { ed25519 } from '@noble/curves/ed25519.js';
import { bytesToNumberLE } from '@noble/curves/utils.js';
import { ApiError } from '../kernel/errors.js';

/**
 * Checks of an Ed25519 public key a machine registers (enrollment, rotation). node:crypto (and WebCrypto) import
 * and verify with any 32 bytes: with a point of small order as the key, a signature of R = that point and S = 0
 * verifies for every message, so whoever holds nothing at all could sign as the machine. A key is accepted only
 * when it decodes canonically to a point of the curve that lies in the prime-order subgroup (as every key
 * derived from a secret scalar does): that refuses the eight small-order points, and every key with a
 * small-order component, whose signatures are not unique either.
 *
 * The curve arithmetic is @noble/curves' (audited), never our own: strict RFC 8032 decoding (`zip215: false`),
 * `isSmallOrder()` and `isTorsionFree()`. A few milliseconds, once per key registration, never per request.
 */

const { Point } = ed25519;
/** The 255 bits of y (the top bit of the last byte is the sign of x). */
const Y_MASK = (1n << 255n) - 1n;

type Decoded = InstanceType<typeof Point> | 'non-canonical' | 'off-curve';

/**
 * RFC 8032 section 5.1.3, strict: a y that is not reduced, or x = 0 with its sign bit set, is not canonical.
 * noble refuses both and a y with no x alike (it throws); a y below p that ZIP-215's lenient decoding accepts is
 * the x = 0 case, so non-canonical, and one that neither accepts is off the curve.
 */
function decode(bytes: Uint8Array): Decoded {
  if ((bytesToNumberLE(bytes) & Y_MASK) >= Point.Fp.ORDER) return 'non-canonical';
  try {
    return Point.fromBytes(bytes, false);
  } catch {
    try {
      Point.fromBytes(bytes, true);
      return 'non-canonical';
    } catch {
      return 'off-curve';
    }
  }
}

/**
 * Why the base64url `x` of an Ed25519 JWK may not be a machine's key, or null when it may: not 32 bytes, not a
 * canonical encoding, not a point of the curve, a point of small order, or a point outside the prime-order
 * subgroup.
 */
export function weakEd25519Key(x: string): string | null {
  const bytes = /^[A-Za-z0-9_-]*$/.test(x) ? Buffer.from(x, 'base64url') : Buffer.alloc(0);
  if (bytes.length !== 32 || bytes.toString('base64url') !== x) return 'the key is not 32 bytes of base64url';
  const point = decode(new Uint8Array(bytes));
  if (point === 'non-canonical') return 'the key is a non-canonical point encoding';
  if (point === 'off-curve') return 'the key is not a point of the Ed25519 curve';
  if (point.isSmallOrder()) return 'the key is a point of small order';
  if (!point.isTorsionFree()) return 'the key is not in the prime-order subgroup';
  return null;
}

/** Refuses (400, as a schema violation of `publicKey.x`) a key `weakEd25519Key` finds wanting. */
export function assertStrongEd25519Key(publicKey: { x: string }): void {
  const weak = weakEd25519Key(publicKey.x);
  if (weak) throw new ApiError('validation_failed', `${weak} at publicKey.x`, [{ path: 'publicKey.x', message: weak }]);
}
