import { ApiError } from '../kernel/errors.js';

/**
 * Checks of an Ed25519 public key a machine registers (enrollment, rotation). node:crypto (and WebCrypto) import
 * and verify with any 32 bytes: with a point of small order as the key, a signature of R = that point and S = 0
 * verifies for every message, so whoever holds nothing at all could sign as the machine. A key is accepted only
 * when it decodes canonically to a point of the curve that lies in the prime-order subgroup (as every key
 * derived from a secret scalar does): that refuses the eight small-order points, and every key with a
 * small-order component, whose signatures are not unique either.
 *
 * BigInt arithmetic over GF(2^255 - 19): a few milliseconds, once per key registration, never per request.
 */

const P = 2n ** 255n - 19n;
/** The order of the prime-order subgroup. */
const L = 2n ** 252n + 27742317777372353535851937790883648493n;

const mod = (a: bigint) => {
  const r = a % P;
  return r >= 0n ? r : r + P;
};

function pow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  for (let e = exponent; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
  }
  return result;
}

const inverse = (a: bigint) => pow(a, P - 2n);
const D = mod(-121665n * inverse(121666n));
const D2 = mod(2n * D);
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

/** Extended twisted Edwards coordinates: x = X/Z, y = Y/Z, x*y = T/Z. */
interface Point {
  X: bigint;
  Y: bigint;
  Z: bigint;
  T: bigint;
}

const IDENTITY: Point = { X: 0n, Y: 1n, Z: 1n, T: 0n };

/** RFC 8032 section 5.1.4 (a = -1). */
function add(p: Point, q: Point): Point {
  const a = mod((p.Y - p.X) * (q.Y - q.X));
  const b = mod((p.Y + p.X) * (q.Y + q.X));
  const c = mod(p.T * D2 * q.T);
  const d = mod(2n * p.Z * q.Z);
  const e = b - a;
  const f = d - c;
  const g = d + c;
  const h = b + a;
  return { X: mod(e * f), Y: mod(g * h), Z: mod(f * g), T: mod(e * h) };
}

function double(p: Point): Point {
  const a = mod(p.X * p.X);
  const b = mod(p.Y * p.Y);
  const c = mod(2n * p.Z * p.Z);
  const h = a + b;
  const e = mod(h - (p.X + p.Y) * (p.X + p.Y));
  const g = a - b;
  const f = c + g;
  return { X: mod(e * f), Y: mod(g * h), Z: mod(f * g), T: mod(e * h) };
}

function multiply(p: Point, scalar: bigint): Point {
  let result = IDENTITY;
  let addend = p;
  for (let k = scalar; k > 0n; k >>= 1n) {
    if (k & 1n) result = add(result, addend);
    addend = double(addend);
  }
  return result;
}

const isIdentity = (p: Point) => mod(p.X) === 0n && mod(p.Y - p.Z) === 0n;

/** RFC 8032 section 5.1.3, strict: a y that is not reduced, or x = 0 with its sign bit set, is not canonical. */
function decode(bytes: Uint8Array): Point | 'non-canonical' | 'off-curve' {
  let y = 0n;
  for (let i = 31; i >= 0; i -= 1) y = (y << 8n) | BigInt(bytes[i]!);
  const sign = y >> 255n;
  y &= (1n << 255n) - 1n;
  if (y >= P) return 'non-canonical';
  const u = mod(y * y - 1n);
  const v = mod(D * y * y + 1n);
  let x = mod(u * pow(v, 3n) * pow(u * pow(v, 7n), (P - 5n) / 8n));
  const vx2 = mod(v * x * x);
  if (vx2 === mod(-u)) x = mod(x * SQRT_M1);
  else if (vx2 !== u) return 'off-curve';
  if (x === 0n && sign === 1n) return 'non-canonical';
  if ((x & 1n) !== sign) x = P - x;
  return { X: x, Y: y, Z: 1n, T: mod(x * y) };
}

/**
 * Why the base64url `x` of an Ed25519 JWK may not be a machine's key, or null when it may: not 32 bytes, not a
 * canonical encoding, not a point of the curve, a point of small order, or a point outside the prime-order
 * subgroup.
 */
export function weakEd25519Key(x: string): string | null {
  const bytes = /^[A-Za-z0-9_-]*$/.test(x) ? Buffer.from(x, 'base64url') : Buffer.alloc(0);
  if (bytes.length !== 32 || bytes.toString('base64url') !== x) return 'the key is not 32 bytes of base64url';
  const point = decode(bytes);
  if (point === 'non-canonical') return 'the key is a non-canonical point encoding';
  if (point === 'off-curve') return 'the key is not a point of the Ed25519 curve';
  if (isIdentity(double(double(double(point))))) return 'the key is a point of small order';
  if (!isIdentity(multiply(point, L))) return 'the key is not in the prime-order subgroup';
  return null;
}

/** Refuses (400, as a schema violation of `publicKey.x`) a key `weakEd25519Key` finds wanting. */
export function assertStrongEd25519Key(publicKey: { x: string }): void {
  const weak = weakEd25519Key(publicKey.x);
  if (weak) throw new ApiError('validation_failed', `${weak} at publicKey.x`, [{ path: 'publicKey.x', message: weak }]);
}
