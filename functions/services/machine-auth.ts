import { eq, sql } from 'drizzle-orm';
import { decodeProtectedHeader, errors as joseErrors, importJWK, jwtVerify, type CryptoKey } from 'jose';
import { machineCredentials, machineJtis, machines } from '../store/schema/index.js';
import { ApiError } from '../errors.js';
import { sha256Base64Url } from '../../shared/canonical.js';
import { MACHINE_JWT_MAX_LIFETIME_S } from '../../shared/machine-jwt.js';
import type { MachinePrincipal } from '../context.js';
import type { ServiceCtx } from './service-context.js';
import { TtlCache } from './ttl-cache.js';

/** Tolerated clock skew between an agent and the database, in seconds. */
const CLOCK_TOLERANCE_S = 5;

function reject(reason: string, message: string, code: 'invalid_machine_token' | 'body_digest_mismatch' | 'replayed_request' | 'machine_revoked' | 'credential_expired' = 'invalid_machine_token'): ApiError {
  return new ApiError(code, message, { reason });
}

/**
 * Verifies one agent request (DESIGN.md section 4): an EdDSA JWT signed by a live credential of the machine
 * it names, for this cluster, this method, path and body, not older than 60 s, never seen before.
 * Throws an `ApiError` (401) with `details.reason` naming the failed check.
 */
export async function verifyMachineRequest({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { token: string; method: string; path: string; body: string; clusterId: string; cache?: MachineAuthCache };
}): Promise<MachinePrincipal> {
  let kid: string | undefined;
  try {
    const header = decodeProtectedHeader(input.token);
    if (header.alg !== 'EdDSA') throw reject('algorithm', `algorithm ${String(header.alg)} is not accepted`);
    kid = header.kid;
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw reject('malformed', 'the machine token is malformed');
  }
  if (!kid) throw reject('kid', 'the machine token names no key');

  const row = input.cache ? await input.cache.credential(ctx, kid) : await loadCredential(ctx, kid);
  if (!row) throw reject('unknown_key', 'the machine token is signed by an unknown key');

  const now = row.now();
  let payload;
  try {
    const key = row.key;
    ({ payload } = await jwtVerify(input.token, key, {
      algorithms: ['EdDSA'],
      issuer: row.machineId,
      subject: row.machineId,
      audience: input.clusterId,
      currentDate: now,
      clockTolerance: CLOCK_TOLERANCE_S,
      requiredClaims: ['iat', 'exp', 'jti'],
    }));
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) throw reject('expired', 'the machine token has expired');
    if (error instanceof joseErrors.JWTClaimValidationFailed) throw reject(`claim_${error.claim}`, `the machine token's ${error.claim} claim is not valid`);
    throw reject('signature', 'the machine token signature does not verify');
  }
  // Checks after the signature, so an attacker learns nothing about a machine's state without its key.
  if (row.revokedAt) throw reject('revoked', 'the machine has been revoked', 'machine_revoked');
  if (row.expiresAt <= now) throw reject('credential_expired', 'the machine credential has expired; enroll again', 'credential_expired');
  const iat = payload.iat!;
  const exp = payload.exp!;
  if (exp - iat > MACHINE_JWT_MAX_LIFETIME_S) throw reject('lifetime', `machine tokens may live at most ${MACHINE_JWT_MAX_LIFETIME_S} s`);
  if (iat > now.getTime() / 1000 + CLOCK_TOLERANCE_S) throw reject('iat', 'the machine token was issued in the future');
  if (payload.htm !== input.method.toUpperCase() || payload.htp !== input.path) {
    throw reject('request_binding', 'the machine token was issued for another request');
  }
  if (payload.bdh !== (await sha256Base64Url(input.body))) throw reject('body_digest', 'the request body does not match the signed digest', 'body_digest_mismatch');

  const jti = { jti: String(payload.jti), machineId: row.machineId, expiresAt: new Date((exp + CLOCK_TOLERANCE_S) * 1000) };
  if (input.cache) {
    if (!input.cache.fence(jti.jti, jti.expiresAt.getTime())) throw reject('replayed', 'the machine token has already been used', 'replayed_request');
    // Recorded for the other instances without holding the request: see MachineAuthCache.
    ctx.ports.relay.jtis.put(jti.jti, jti);
  } else {
    const fenced = await ctx.db.insert(machineJtis).values(jti).onConflictDoNothing().returning({ jti: machineJtis.jti });
    if (fenced.length === 0) throw reject('replayed', 'the machine token has already been used', 'replayed_request');
  }
  return { machineId: row.machineId, workspaceId: row.workspaceId, credentialId: kid };
}

interface CredentialRow {
  machineId: string;
  workspaceId: string;
  revokedAt: Date | null;
  expiresAt: Date;
  key: CryptoKey;
  /** The database's clock, now. */
  now(): Date;
}

async function loadCredential(ctx: ServiceCtx, kid: string): Promise<CredentialRow | null> {
  const [row] = await ctx.db
    .select({
      machineId: machines.id,
      workspaceId: machines.workspaceId,
      revokedAt: machines.revokedAt,
      publicKey: machineCredentials.publicKey,
      expiresAt: machineCredentials.expiresAt,
      now: sql<string>`now()`,
    })
    .from(machineCredentials)
    .innerJoin(machines, eq(machines.id, machineCredentials.machineId))
    .where(eq(machineCredentials.id, kid));
  if (!row) return null;
  const dbNow = new Date(row.now).getTime();
  const offset = dbNow - Date.now();
  return {
    machineId: row.machineId,
    workspaceId: row.workspaceId,
    revokedAt: row.revokedAt,
    expiresAt: row.expiresAt,
    key: (await importJWK({ ...row.publicKey }, 'EdDSA')) as CryptoKey,
    now: () => new Date(Date.now() + offset),
  };
}

/**
 * The hot path's verifier state, for frame uploads only: credentials are cached for a couple of seconds
 * (with the database clock's offset), and the replay fence is checked in memory and recorded in the store
 * without waiting. That is safe there because a frame upload is also bound to an invocation that exists
 * only on the instance that dispatched it and only while it runs; a revoked machine's stream is closed at
 * once, which fails its invocations, so its uploads find nothing to write to.
 */
export class MachineAuthCache {
  private readonly credentials = new TtlCache<CredentialRow>(2_000);
  private readonly jtis = new Map<string, number>();

  async credential(ctx: ServiceCtx, kid: string): Promise<CredentialRow | null> {
    const cached = this.credentials.get(kid);
    if (cached) return cached;
    const row = await loadCredential(ctx, kid);
    if (row) this.credentials.set(kid, row);
    return row;
  }

  /** False when the jti was seen before; remembers it until the token expires. */
  fence(jti: string, expiresAtMs: number): boolean {
    if (this.jtis.has(jti)) return false;
    if (this.jtis.size > 10_000) {
      const now = Date.now();
      for (const [key, until] of this.jtis) if (until < now) this.jtis.delete(key);
    }
    this.jtis.set(jti, expiresAtMs);
    return true;
  }
}

/** Deletes replay-fence rows whose tokens can no longer be presented. */
export async function sweepJtis({ ctx }: { ctx: ServiceCtx }): Promise<void> {
  await ctx.db.delete(machineJtis).where(sql`${machineJtis.expiresAt} < now()`);
}
