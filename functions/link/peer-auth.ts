import { createHmac, createSecretKey, randomBytes, timingSafeEqual, type KeyObject } from 'node:crypto';
import { z } from 'zod';
import { ApiError } from '../kernel/errors.js';
import type { ControlPlaneIdentity } from '../services/identity.js';

/** A peer token is good this long after it is minted: the one request it is for leaves at once. */
const TOKEN_TTL_MS = 5_000;
/** How far the instances' clocks may disagree (NTP keeps them well within it). */
const CLOCK_SKEW_MS = 5_000;
/**
 * Token ids the replay fence holds at most: each stays until its token can no longer be presented (at most
 * TOKEN_TTL_MS + 2 * CLOCK_SKEW_MS), so this is 10,000 forwarded requests a second into one instance, about 10 MB.
 */
const MAX_FENCED = 100_000;

/** What a peer token is bound to: the one request it may authenticate. */
export interface PeerRequest {
  method: string;
  /** The request target as sent: path and query. */
  path: string;
  /** The `x-lunanexa-machine` header's value. */
  machineId: string;
}

const PeerClaims = z.object({
  /** The calling instance. */
  sub: z.string(),
  /** The instance called. */
  aud: z.string(),
  /** Expiry, epoch milliseconds. */
  exp: z.number(),
  /** The token's id: the callee takes each once. */
  jti: z.string().min(16).max(64),
  /** The invocation a forwarded `invoke` carries (its body, read after the token is checked). */
  inv: z.string().optional(),
});
type PeerClaims = z.infer<typeof PeerClaims>;

/**
 * Authentication of the internal peer channel (docs/design.md section 5, step 3; docs/security.md, "The peer
 * channel"). A peer token is `Peer <claims>.<mac>`: base64url JSON claims, and an HMAC-SHA256 over them and the
 * request it is for (method, path and query, machine header) under the cluster's peer key, which only instances can
 * derive (`SigningKey.peerKey`). Each request gets its own token, good for seconds, and the callee takes a token
 * once (a replay fence of the token ids it has seen, bounded): one seen on the wire cannot be sent again, nor used
 * for another route, machine or invocation.
 *
 * HMAC rather than the EdDSA JWT this was before: a token per request is on the hot path of every forwarded
 * request, and jose's EdDSA sign and verify cost about 310 µs together where this costs about 14 µs
 * (`npm run bench:peer-auth`). A signature would let a callee verify without being able to mint; every verifier here
 * is an instance that mints too, so nothing is lost.
 */
export class PeerAuth {
  private readonly fenced = new Map<string, number>();
  private key: KeyObject | undefined;

  constructor(
    private readonly instanceId: string,
    private readonly identity: () => Promise<ControlPlaneIdentity>,
  ) {}

  private async peerKey(): Promise<KeyObject> {
    this.key ??= createSecretKey((await this.identity()).signingKey.peerKey);
    return this.key;
  }

  /** The `authorization` value for `request` to instance `target`; `invocationId` for a forwarded invocation. */
  async header(target: string, request: PeerRequest, invocationId?: string): Promise<string> {
    const key = await this.peerKey();
    const claims: PeerClaims = {
      sub: this.instanceId,
      aud: target,
      exp: Date.now() + TOKEN_TTL_MS,
      jti: randomBytes(16).toString('base64url'),
      inv: invocationId,
    };
    const encoded = Buffer.from(JSON.stringify(claims)).toString('base64url');
    return `Peer ${encoded}.${mac(key, encoded, request).toString('base64url')}`;
  }

  /**
   * The claims of `authorization` when it is a peer token of this cluster, for this instance and `request`, live,
   * and never presented before; null otherwise. Throws 503 when the replay fence is full (see MAX_FENCED).
   */
  async verify(authorization: string | undefined, request: PeerRequest): Promise<PeerClaims | null> {
    if (!authorization?.startsWith('Peer ')) return null;
    const dot = authorization.indexOf('.', 5);
    if (dot < 0) return null;
    const encoded = authorization.slice(5, dot);
    const given = Buffer.from(authorization.slice(dot + 1), 'base64url');
    const expected = mac(await this.peerKey(), encoded, request);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    let claims: PeerClaims;
    try {
      claims = PeerClaims.parse(JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8')));
    } catch {
      // Not swallowed: claims an instance made that do not parse (another version's) are refused, and answered 401.
      return null;
    }
    const now = Date.now();
    if (claims.aud !== this.instanceId || claims.exp + CLOCK_SKEW_MS < now || claims.exp > now + TOKEN_TTL_MS + CLOCK_SKEW_MS) return null;
    return this.fence(claims.jti, claims.exp + CLOCK_SKEW_MS, now) ? claims : null;
  }

  /** False when `jti` was taken before; otherwise remembers it until `until`, when its token is refused anyway. */
  private fence(jti: string, until: number, now: number): boolean {
    if (this.fenced.has(jti)) return false;
    // Entries arrive in about the order they expire: the expired head goes first, without a scan of the rest.
    for (const [id, at] of this.fenced) {
      if (at >= now) break;
      this.fenced.delete(id);
    }
    if (this.fenced.size >= MAX_FENCED) {
      for (const [id, at] of this.fenced) if (at < now) this.fenced.delete(id);
      // Forgetting a live id would let its token be replayed: refuse instead, and the caller tries another replica.
      if (this.fenced.size >= MAX_FENCED) throw new ApiError('unavailable', 'too many peer requests at once');
    }
    this.fenced.set(jti, until);
    return true;
  }
}

/** The MAC of a token's claims and the request it is for: no field can contain the newline between them. */
function mac(key: KeyObject, claims: string, request: PeerRequest): Buffer {
  return createHmac('sha256', key).update(`${claims}\n${request.method}\n${request.path}\n${request.machineId}`).digest();
}
