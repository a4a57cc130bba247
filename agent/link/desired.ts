import { createLocalJWKSet, jwtVerify, errors as joseErrors } from 'jose';
import { DesiredState } from '../../shared/contracts/desired.js';
import type { Jwks } from '../../shared/contracts/enrollment.js';

export type DesiredVerdict = { accepted: true; desired: DesiredState } | { accepted: false; reason: string };

/**
 * Verifies a desired-state JWS against the pinned JWKS (DESIGN.md section 4): EdDSA only, signed by the
 * control plane, for this machine, not expired, and not older than the generation already held.
 */
export async function verifyDesiredState(input: { jws: string; jwks: Jwks; machineId: string; clusterId: string; heldGen: number; now?: Date }): Promise<DesiredVerdict> {
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(input.jws, createLocalJWKSet(input.jwks as Parameters<typeof createLocalJWKSet>[0]), {
      algorithms: ['EdDSA'],
      issuer: input.clusterId,
      currentDate: input.now,
      requiredClaims: ['sub', 'iat', 'exp'],
    }));
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) return { accepted: false, reason: 'expired' };
    if (error instanceof joseErrors.JWTClaimValidationFailed) return { accepted: false, reason: `claim ${error.claim} invalid` };
    return { accepted: false, reason: 'signature does not verify against the pinned keys' };
  }
  const parsed = DesiredState.safeParse(payload);
  if (!parsed.success) return { accepted: false, reason: 'claims do not match the desired-state contract' };
  if (parsed.data.sub !== input.machineId) return { accepted: false, reason: 'desired state is for another machine' };
  if (parsed.data.gen < input.heldGen) return { accepted: false, reason: `generation ${parsed.data.gen} is older than held ${input.heldGen}` };
  return { accepted: true, desired: parsed.data };
}
