import { eq, sql } from 'drizzle-orm';
import { machineCredentials, machineJtis, machines } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { sha256Base64Url } from '../../shared/canonical.js';
import { MACHINE_JWT_MAX_LIFETIME_S } from '../../shared/machine-jwt.js';
import type { MachinePrincipal } from '../core/principals.js';
import type { ServiceCtx, ServicePorts } from './service-context.js';
import type { Db } from '../store/db.js';
import type { WriteBehind } from '../store/write-behind.js';
import { column, iso } from '../store/rows.js';
import { TtlCache } from '../kernel/ttl-cache.js';
import { ed25519Verifier, type Ed25519Verifier } from './ed25519.js';

/**
 * What a `kid` (a credential id) and a `jti` may look like. Both reach the store (the credential lookup, the
 * replay fence), where a NUL byte is an error of PostgreSQL's own: the kid is checked before anything else, with
 * no key and no credential needed to send one.
 */
const KID = /^[A-Za-z0-9_-]{1,64}$/;
const JTI = /^[\x21-\x7e]{1,128}$/;

function reject(
  reason: string,
  message: string,
  code: 'invalid_machine_token' | 'body_digest_mismatch' | 'replayed_request' | 'machine_revoked' | 'credential_expired' = 'invalid_machine_token',
): ApiError {
  return new ApiError(code, message, { reason });
}

/**
 * A token whose times are off by more than the tolerance: the agent signs with its own clock (corrected by the
 * offset it measured), so the difference names that clock, for the operator to fix and for the agent to measure
 * again. `skewS` is how far the machine's clock is ahead (negative: behind), as the token shows it.
 */
function clockSkew(reason: 'iat' | 'expired', skewS: number, detail: string): ApiError {
  const side = skewS > 0 ? 'ahead of' : 'behind';
  return new ApiError('clock_skew', `the machine's clock is ${Math.abs(skewS)} s ${side} the control plane's (${detail}); fix its time (NTP)`, {
    reason,
    clockSkewS: skewS,
  });
}

function jsonObject(part: string): Record<string, unknown> {
  const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not a JSON object');
  return value as Record<string, unknown>;
}

/**
 * The registered claims of a verified machine JWT: the claim that fails (`expired` for `exp` in the past),
 * or null. iat, exp and jti are required; the issuer and subject are the machine, the audience the cluster.
 */
function claimsProblem(payload: Record<string, unknown>, expected: { issuer: string; audience: string; nowS: number; toleranceS: number }): string | null {
  for (const claim of ['iat', 'exp', 'jti']) if (payload[claim] === undefined) return claim;
  if (payload.iss !== expected.issuer) return 'iss';
  if (payload.sub !== expected.issuer) return 'sub';
  const audiences = Array.isArray(payload.aud) ? payload.aud : [payload.aud];
  if (!audiences.includes(expected.audience)) return 'aud';
  if (typeof payload.iat !== 'number' || !Number.isFinite(payload.iat)) return 'iat';
  if (payload.nbf !== undefined && (typeof payload.nbf !== 'number' || payload.nbf > expected.nowS + expected.toleranceS)) return 'nbf';
  if (typeof payload.exp !== 'number' || !Number.isFinite(payload.exp)) return 'exp';
  if (payload.exp <= expected.nowS - expected.toleranceS) return 'expired';
  if (typeof payload.jti !== 'string' || !JTI.test(payload.jti)) return 'jti';
  return null;
}

/**
 * Verifies one agent request (docs/design.md section 4): an EdDSA JWT signed by a live credential of the machine
 * it names, for this cluster, this method, path and body, not older than 60 s, never seen before, its times
 * within the tolerated clock skew (`clock_skew` otherwise). Throws an `ApiError` (401) with `details.reason`
 * naming the failed check.
 */
export async function verifyMachineRequest({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { token: string; method: string; path: string; body: string; clusterId: string; cache?: MachineAuthCache };
}): Promise<MachinePrincipal> {
  const parts = input.token.split('.');
  let header: Record<string, unknown>;
  let payload: Record<string, unknown>;
  try {
    if (parts.length !== 3) throw new Error('not a compact JWS');
    header = jsonObject(parts[0]!);
    payload = jsonObject(parts[1]!);
  } catch {
    throw reject('malformed', 'the machine token is malformed');
  }
  if (header.alg !== 'EdDSA') throw reject('algorithm', `algorithm ${String(header.alg)} is not accepted`);
  if (header.crit !== undefined) throw reject('malformed', 'the machine token has critical header parameters');
  const kid = typeof header.kid === 'string' ? header.kid : undefined;
  if (!kid) throw reject('kid', 'the machine token names no key');
  if (!KID.test(kid)) throw reject('kid', 'the machine token names a key no credential can have');

  const row = input.cache ? await input.cache.credential(ctx, kid) : await loadCredential(ctx, kid);
  if (!row) throw reject('unknown_key', 'the machine token is signed by an unknown key');

  const signature = Buffer.from(parts[2]!, 'base64url');
  if (!(await row.verifier.verify(Buffer.from(`${parts[0]}.${parts[1]}`), signature))) throw reject('signature', 'the machine token signature does not verify');
  const now = row.now();
  const nowS = now.getTime() / 1000;
  const toleranceS = ctx.config.clockSkewToleranceMs / 1000;
  const invalid = claimsProblem(payload, { issuer: row.machineId, audience: input.clusterId, nowS, toleranceS });
  if (invalid === 'expired') {
    const iat = payload.iat as number;
    throw clockSkew(
      'expired',
      Math.round(iat - nowS),
      `the token was issued ${Math.round(nowS - iat)} s ago and expired ${Math.round(nowS - (payload.exp as number))} s ago`,
    );
  }
  if (invalid) throw reject(`claim_${invalid}`, `the machine token's ${invalid} claim is not valid`);
  // Checks after the signature, so an attacker learns nothing about a machine's state without its key.
  if (row.revokedAt) throw reject('revoked', 'the machine has been revoked', 'machine_revoked');
  if (row.expiresAt <= now) throw reject('credential_expired', 'the machine credential has expired; enroll again', 'credential_expired');
  const iat = payload.iat as number;
  const exp = payload.exp as number;
  if (exp - iat > MACHINE_JWT_MAX_LIFETIME_S) throw reject('lifetime', `machine tokens may live at most ${MACHINE_JWT_MAX_LIFETIME_S} s`);
  if (iat > nowS + toleranceS) throw clockSkew('iat', Math.round(iat - nowS), `the token was issued ${Math.round(iat - nowS)} s in the future`);
  if (payload.htm !== input.method.toUpperCase() || payload.htp !== input.path) {
    throw reject('request_binding', 'the machine token was issued for another request');
  }
  if (payload.bdh !== (await sha256Base64Url(input.body)))
    throw reject('body_digest', 'the request body does not match the signed digest', 'body_digest_mismatch');

  const jti = { jti: String(payload.jti), machineId: row.machineId, expiresAt: new Date((exp + toleranceS) * 1000) };
  if (input.cache) {
    if (!input.cache.fence(jti)) throw reject('replayed', 'the machine token has already been used', 'replayed_request');
  } else {
    const fenced = await ctx.db.insert(machineJtis).values(jti).onConflictDoNothing().returning({ jti: machineJtis.jti });
    if (fenced.length === 0) throw reject('replayed', 'the machine token has already been used', 'replayed_request');
  }
  return { machineId: row.machineId, workspaceId: row.workspaceId, credentialId: kid, credentialExpiresAt: row.expiresAt };
}

/** A replay-fence entry: a machine token's id, kept until the token can no longer be presented. */
export interface MachineJti {
  jti: string;
  machineId: string;
  expiresAt: Date;
}

interface CredentialRow {
  machineId: string;
  workspaceId: string;
  revokedAt: Date | null;
  expiresAt: Date;
  verifier: Ed25519Verifier;
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
    verifier: await ed25519Verifier(row.publicKey),
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

  /** `recorded`: where the fence's entries go for the other instances, written behind the uploads. */
  constructor(private readonly recorded: WriteBehind<MachineJti>) {}

  async credential(ctx: ServiceCtx, kid: string): Promise<CredentialRow | null> {
    const cached = this.credentials.get(kid);
    if (cached) return cached;
    const row = await loadCredential(ctx, kid);
    if (row) this.credentials.set(kid, row);
    return row;
  }

  /**
   * False when the jti was seen before; remembers it until the token expires, and records it for the other
   * instances without holding the request.
   */
  fence(entry: MachineJti): boolean {
    const { jti } = entry;
    if (this.jtis.has(jti)) return false;
    if (this.jtis.size > 10_000) {
      // Entries arrive in about the order they expire (every token lives at most 60 s): drop the expired head
      // rather than scanning every live entry on each upload.
      const now = Date.now();
      for (const [key, until] of this.jtis) {
        if (until >= now) break;
        this.jtis.delete(key);
      }
    }
    this.jtis.set(jti, entry.expiresAt.getTime());
    this.recorded.put(jti, entry);
    return true;
  }

  /** Writes the fence entries still pending (a Workers request's last act). */
  async flush(): Promise<void> {
    await this.recorded.flush();
  }
}

/** Records replay-fence entries in one statement (column arrays: see `column`). */
export async function writeJtis(db: Db, rows: MachineJti[]): Promise<void> {
  await db.execute(sql`
    insert into machine_jtis (jti, machine_id, expires_at)
    select * from unnest(${column(rows, (r) => r.jti)}::text[], ${column(rows, (r) => r.machineId)}::text[], ${column(rows, (r) => iso(r.expiresAt))}::timestamptz[])
    on conflict do nothing`);
}

/** Deletes replay-fence rows whose tokens can no longer be presented. */
export async function sweepJtis({ ctx }: { ctx: ServiceCtx }): Promise<void> {
  await ctx.db.delete(machineJtis).where(sql`${machineJtis.expiresAt} < now()`);
}
