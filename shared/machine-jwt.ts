import { SignJWT, type CryptoKey, type KeyObject } from 'jose';
import { sha256Base64Url } from './canonical.js';

/** Longest lifetime the control plane accepts for a machine request JWT (DESIGN.md section 4). */
export const MACHINE_JWT_MAX_LIFETIME_S = 60;

/** Claims that bind a machine JWT to one request. */
export interface MachineRequestClaims {
  /** HTTP method, upper case. */
  htm: string;
  /** Request path without query string. */
  htp: string;
  /** base64url SHA-256 of the exact body bytes (of the empty string when there is none). */
  bdh: string;
}

/**
 * Signs the per-request JWT an agent sends as `Authorization: Bearer`.
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
}): Promise<string> {
  const claims: MachineRequestClaims = {
    htm: input.method.toUpperCase(),
    htp: input.path,
    bdh: await sha256Base64Url(input.body),
  };
  return await new SignJWT({ ...claims })
    .setProtectedHeader({ alg: 'EdDSA', kid: input.kid, typ: 'lunanexa-machine+jwt' })
    .setIssuer(input.machineId)
    .setSubject(input.machineId)
    .setAudience(input.clusterId)
    .setIssuedAt()
    .setExpirationTime(`${input.lifetimeS ?? 30}s`)
    .setJti(crypto.randomUUID())
    .sign(input.key);
}
