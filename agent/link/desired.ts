import { createLocalJWKSet, jwtVerify, errors as joseErrors } from 'jose';
import { DesiredState } from '../../shared/contracts/desired.js';
import type { Jwks } from '../../shared/contracts/enrollment.js';

export type DesiredVerdict = { accepted: true; desired: DesiredState } | { accepted: false; reason: string };

/**
 * Verifies a desired-state JWS against the pinned JWKS (docs/design.md section 4): EdDSA only, signed by the
 * control plane, for this machine, not expired, and not older than the generation already held.
 */
export async function verifyDesiredState(input: {
  jws: string;
  jwks: Jwks;
  machineId: string;
  clusterId: string;
  heldGen: number;
  now?: Date;
}): Promise<DesiredVerdict> {
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

export interface DesiredIntakeOptions {
  /** The generation held when the agent started (kept on disk across restarts). */
  heldGen: number;
  verify: (jws: string, heldGen: number) => Promise<DesiredVerdict>;
  /** Persists a newly held generation, before the supervisor acts on it. */
  save: (gen: number) => Promise<void>;
  apply: (desired: DesiredState) => void;
  onRejected: (reason: string) => void;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/**
 * Takes `desired` events one at a time, in arrival order: each is verified against the generation the one before
 * it left, so two states a millisecond apart never apply out of order and never race to write the generation.
 */
export function createDesiredIntake(opts: DesiredIntakeOptions) {
  let heldGen = opts.heldGen;
  let queue: Promise<void> = Promise.resolve();
  let pending = 0;

  async function take(jws: string): Promise<void> {
    const verdict = await opts.verify(jws, heldGen);
    if (!verdict.accepted) return opts.onRejected(verdict.reason);
    if (verdict.desired.gen !== heldGen) {
      try {
        await opts.save(verdict.desired.gen);
      } catch (error) {
        // The state is verified and current, so it is applied all the same: the file only keeps an agent that
        // restarts from accepting an older state again, which the next successful write restores.
        opts.log('saving the held generation failed', { gen: verdict.desired.gen, error: error instanceof Error ? error.message : String(error) });
      }
    }
    heldGen = verdict.desired.gen;
    opts.apply(verdict.desired);
  }

  return {
    offer(jws: string): void {
      pending += 1;
      queue = queue
        .then(() => take(jws))
        .catch((error: unknown) => opts.log('desired state intake failed', { error: error instanceof Error ? error.message : String(error) }))
        .finally(() => {
          pending -= 1;
        });
    },
    heldGen: () => heldGen,
    /** True while a desired state is being verified or applied. */
    busy: () => pending > 0,
  };
}
