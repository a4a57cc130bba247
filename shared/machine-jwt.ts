import { KeyObject, randomUUID, sign } from 'node:crypto';
import type { CryptoKey } from 'jose';
import { sha256Base64Url } from './canonical.js';

/** Longest lifetime the control plane accepts for a machine request JWT (docs/design.md section 4). */
export const MACHINE_JWT_MAX_LIFETIME_S = 60;

/** Claims that bind a machine JWT to one request. */
interface MachineRequestClaims {
  /** HTTP method, upper case. */
  htm: string;
  /** Request path without query string. */
  htp: string;
  /** base64url SHA-256 of the exact body bytes (of the empty string when there is none). */
  bdh: string;
}

// Signed with node:crypto rather than jose: every agent request signs one, and a synchronous Ed25519
// signature costs tens of microseconds where a WebCrypto job round trip costs several times that.
const keyObjects = new WeakMap<object, KeyObject>();

function keyObjectOf(key: CryptoKey | KeyObject): KeyObject {
  if (key instanceof KeyObject) return key;
  let object = keyObjects.get(key);
  if (!object) keyObjects.set(key, (object = KeyObject.from(key as Parameters<typeof KeyObject.from>[0])));
  return object;
}

const base64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/**
 * Signs the per-request JWT an agent sends as `Authorization: Bearer` (an EdDSA compact JWS).
 * @example await signMachineRequest({ key, kid, machineId, clusterId, method: 'POST', path: '/agent/v1/heartbeat', body })
 */
export async function signMachineRequest(input: {
  key: CryptoKey | KeyObject;
  kid: string;
  machineId: string;
  clusterId: string;
  method: string;
  path: string;
  body: string | Uint8Array;
  lifetimeS?: number;
  /**
   * The signing time in the control plane's clock (epoch ms): an agent passes its own clock corrected by the
   * offset it measured, so that a machine whose clock is off is not refused for it.
   */
  nowMs?: number;
}): Promise<string> {
  const iat = Math.floor((input.nowMs ?? Date.now()) / 1000);
  const claims: MachineRequestClaims & Record<string, unknown> = {
    htm: input.method.toUpperCase(),
    htp: input.path,
    bdh: await sha256Base64Url(input.body),
    iss: input.machineId,
    sub: input.machineId,
    aud: input.clusterId,
    iat,
    exp: iat + (input.lifetimeS ?? 30),
    jti: randomUUID(),
  };
  const signingInput = `${base64url({ alg: 'EdDSA', kid: input.kid, typ: 'lunanexa-machine+jwt' })}.${base64url(claims)}`;
  return `${signingInput}.${sign(null, Buffer.from(signingInput), keyObjectOf(input.key)).toString('base64url')}`;
}
