import { createLocalJWKSet, jwtVerify, SignJWT } from 'jose';
import type { ControlPlaneIdentity } from '../services/identity.js';

/** A peer token lives this long; the caller reuses one per target for half of it. */
const TOKEN_TTL_S = 60;
const TYP = 'lunanexa-peer+jwt';
/** Verified tokens remembered at most (one per calling instance and minute in practice). */
const MAX_VERIFIED = 1_024;

/**
 * Authentication of the internal peer channel (docs/design.md section 5, step 3). Only control-plane instances
 * hold the cluster signing key, so a token it signs for `aud = <callee instance>` proves the caller is one; agents
 * hold the public half only. A token is minted per target every half-TTL and verified once by the callee, then
 * remembered until it expires: the hot path pays a map lookup, not a signature, per forwarded request.
 */
export class PeerAuth {
  private readonly minted = new Map<string, { token: string; renewAt: number }>();
  private readonly verified = new Map<string, number>();

  constructor(
    private readonly instanceId: string,
    private readonly identity: () => Promise<ControlPlaneIdentity>,
  ) {}

  /** The `authorization` value for requests to instance `target`. */
  async header(target: string): Promise<string> {
    const now = Date.now();
    const cached = this.minted.get(target);
    if (cached && cached.renewAt > now) return cached.token;
    const { signingKey, clusterId } = await this.identity();
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: 'EdDSA', kid: signingKey.kid, typ: TYP })
      .setIssuer(clusterId)
      .setSubject(this.instanceId)
      .setAudience(target)
      .setIssuedAt()
      .setExpirationTime(`${TOKEN_TTL_S}s`)
      .sign(signingKey.privateKey);
    const header = `Peer ${token}`;
    this.minted.set(target, { token: header, renewAt: now + (TOKEN_TTL_S * 1000) / 2 });
    return header;
  }

  /** Whether `authorization` is a peer token of this cluster for this instance. */
  async verify(authorization: string | undefined): Promise<boolean> {
    if (!authorization?.startsWith('Peer ')) return false;
    const now = Date.now();
    const expires = this.verified.get(authorization);
    if (expires !== undefined) {
      if (expires > now) return true;
      this.verified.delete(authorization);
    }
    const { jwks, clusterId } = await this.identity();
    try {
      const { payload } = await jwtVerify(authorization.slice(5), createLocalJWKSet(jwks), {
        algorithms: ['EdDSA'],
        typ: TYP,
        issuer: clusterId,
        audience: this.instanceId,
        requiredClaims: ['sub', 'exp'],
      });
      if (this.verified.size >= MAX_VERIFIED) {
        for (const [token, at] of this.verified) if (at <= now) this.verified.delete(token);
        if (this.verified.size >= MAX_VERIFIED) this.verified.clear();
      }
      this.verified.set(authorization, payload.exp! * 1000);
      return true;
    } catch {
      // Not swallowed: a token that does not verify is refused, and the peer server answers it 401.
      return false;
    }
  }
}
