import { createHmac } from 'node:crypto';
import type { Context } from 'hono';
import { deleteCookie, getSignedCookie, setSignedCookie } from 'hono/cookie';
import { storeSecret } from '../../services/store-secrets.js';
import type { Role } from '../../../shared/contracts/common.js';
import type { Actor } from '../../core/principals.js';
import { roleCovers } from '../../core/token-rules.js';
import { consoleSessionLive, createConsoleSession, endConsoleSession, findConsoleSession, takeSignInNonce } from '../../services/console-sessions.js';
import { serviceCtx, type AppEnv, type Ports } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';

/** The session cookie: the session's random secret, signed with the console key. */
const SESSION_COOKIE = 'lnx_session';
/**
 * The sign-in form's own CSRF nonce (double submit): there is no session to bind a token to yet. Its value is
 * `<random>.<expiry, epoch ms>`, and it is good for one attempt (`checkSignInNonce`).
 */
const SIGN_IN_COOKIE = 'lnx_sign_in';
/** A console session lives at most this long, and never past its API token's expiry. */
const SESSION_TTL_MS = 12 * 3600_000;
const SIGN_IN_TTL_S = 3600;

/** A signed-in console user: the session, and the API token it was opened with (who acts, in which workspace). */
export interface ConsoleSession {
  id: string;
  tokenId: string;
  workspaceId: string;
  role: Exclude<Role, 'inference'>;
  expiresAt: Date;
  /** The per-session CSRF token every state-changing form carries. */
  csrf: string;
}

/** The console's Hono environment: the app's, plus the session once `requireSession` found one. */
export interface ConsoleEnv {
  Variables: AppEnv['Variables'] & { session: ConsoleSession };
}

/** The app's ports, from any console context. */
export function portsOf(c: Context): Ports {
  return c.get('ports') as Ports;
}

/** Whether the session's role is at least `role`: the management API's own rule (`roleCovers`, viewer < operator < admin). */
export function allows(session: Pick<ConsoleSession, 'role'>, role: Exclude<Role, 'inference'>): boolean {
  return roleCovers(session.role, role);
}

/** Throws 403 unless the session's role is at least `role`: the rule the API applies to the same verb. */
export function requireRoleOf(session: ConsoleSession, role: Exclude<Role, 'inference'>): void {
  if (!allows(session, role)) throw new ApiError('forbidden', `this needs the ${role} role; you are signed in as ${session.role}`);
}

/**
 * The console key: the HMAC key that signs the session cookie and derives each session's CSRF token. Random, made
 * once per store and kept in `cluster_settings` (like the cluster id), so every instance on the store, and every
 * restart, agrees on it without configuration. It is not what guards a session: the cookie's value is the
 * session's own 256-bit secret, of which the store holds only the SHA-256; the signature lets a forged or
 * mangled cookie be refused before any lookup, and a CSRF token is worthless without the session's cookie.
 * Someone who can read the store could mint CSRF tokens, but not a session.
 */
function consoleKey(ports: Ports): Promise<string> {
  return storeSecret(ports, 'console_key');
}

/** 32 random bytes, base64url. */
function randomToken(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString('base64url');
}

// node:crypto, as shared/canonical.ts: every console request derives its CSRF token, and a synchronous HMAC of a
// few bytes costs microseconds where WebCrypto imports a key and crosses a job queue each time.
function hmac(key: string, data: string): string {
  return createHmac('sha256', key).update(data).digest('base64url');
}

/** Compares in time independent of where two strings differ. */
function sameSecret(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i += 1) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** The CSRF token of a session: bound to it, so a token seen in one session is worthless in another. */
async function csrfOf(ports: Ports, sessionId: string): Promise<string> {
  return hmac(await consoleKey(ports), `csrf:${sessionId}`);
}

/** True for a request to a loopback host (`npm start`, tests): the only place the cookie may go without `Secure`. */
function isLoopback(c: Context): boolean {
  const url = new URL(c.req.url);
  // Behind a TLS-terminating proxy on the same host the browser still speaks HTTPS: keep Secure then.
  if (c.req.header('x-forwarded-proto')?.toLowerCase() === 'https') return false;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function cookieOptions(c: Context, maxAgeS: number) {
  return { httpOnly: true, sameSite: 'Strict' as const, secure: !isLoopback(c), path: '/', maxAge: Math.max(0, Math.floor(maxAgeS)) };
}

/**
 * Same-origin check of a state-changing request, beside the CSRF token: a browser says where a POST comes from.
 * `Sec-Fetch-Site` (a header no page can set) must be `same-origin`; a browser that does not send it is judged by
 * `Origin`, which must be this console's origin, scheme included (`null`, from a sandboxed frame or a file, is
 * refused). A client that sends neither (curl) still needs the token.
 */
function sameOrigin(c: Context): boolean {
  const site = c.req.header('sec-fetch-site');
  if (site !== undefined) return site === 'same-origin';
  const origin = c.req.header('origin');
  if (origin === undefined) return true;
  // Behind a TLS-terminating proxy the request URL says http while the browser's origin says https: the operator
  // names that origin in LUNANEXA_PUBLIC_URL (docs/security.md, "The console").
  const { publicUrl } = portsOf(c).config;
  try {
    const from = new URL(origin).origin;
    return from === new URL(c.req.url).origin || (publicUrl !== undefined && from === new URL(publicUrl).origin);
  } catch {
    return false;
  }
}

/** Refuses a state-changing request that is cross-site, or whose form lacks the session's CSRF token (403). */
export function checkCsrf(c: Context, session: ConsoleSession, token: string | undefined): void {
  if (!sameOrigin(c)) throw new ApiError('forbidden', 'this form was sent from another site; open the console and try again');
  if (!token || !sameSecret(token, session.csrf))
    throw new ApiError('forbidden', 'the form is missing its CSRF token or it is stale; reload the page and try again');
}

/** Sets the sign-in form's nonce cookie and returns the nonce the form carries. */
export async function issueSignInNonce(c: Context): Promise<string> {
  const nonce = `${randomToken()}.${Date.now() + SIGN_IN_TTL_S * 1000}`;
  await setSignedCookie(c, SIGN_IN_COOKIE, nonce, await consoleKey(portsOf(c)), cookieOptions(c, SIGN_IN_TTL_S));
  return nonce;
}

/**
 * Checks the sign-in form: same origin, its nonce equal to the signed cookie's (double submit) and not expired, and
 * takes the nonce, so that it is good for one attempt, whatever its outcome, on any instance: guessing tokens needs a
 * fresh form each time (the page that answers an attempt carries one). 403 otherwise.
 */
export async function checkSignInNonce(c: Context, nonce: string | undefined): Promise<void> {
  if (!sameOrigin(c)) throw new ApiError('forbidden', 'this sign-in form was sent from another site; open the console and sign in there');
  const ports = portsOf(c);
  const cookie = await getSignedCookie(c, await consoleKey(ports), SIGN_IN_COOKIE);
  const expiresAt = Number(nonce?.split('.')[1]);
  if (!cookie || !nonce || !sameSecret(cookie, nonce) || !(expiresAt > Date.now()))
    throw new ApiError('forbidden', 'the sign-in form is stale (or cookies are blocked); reload the sign-in page and try again');
  if (!(await takeSignInNonce({ ctx: serviceCtx(ports, 'anonymous'), input: { nonce, expiresAt: new Date(expiresAt) } })))
    throw new ApiError('forbidden', 'this sign-in form was sent already, and each is good for one attempt; reload the sign-in page and try again');
}

/**
 * Opens a session for an authenticated API token: a row holding the SHA-256 of a new random secret, expiring after
 * `SESSION_TTL_MS` or with the token, whichever is first (the database's clock); the secret goes in the cookie.
 */
export async function openSession(c: Context, actor: Actor): Promise<void> {
  const ports = portsOf(c);
  const secret = randomToken();
  const ctx = serviceCtx(ports, actor.tokenId);
  const session = await createConsoleSession({
    ctx,
    input: { secret, tokenId: actor.tokenId, workspaceId: actor.workspaceId, role: actor.role, ttlMs: SESSION_TTL_MS },
  });
  await setSignedCookie(c, SESSION_COOKIE, secret, await consoleKey(ports), cookieOptions(c, session.lifetimeS));
  deleteCookie(c, SIGN_IN_COOKIE, { path: '/', secure: !isLoopback(c), httpOnly: true, sameSite: 'Strict' });
}

/** The session whose cookie the request carries, if it is live: not ended, not expired, its API token neither revoked nor expired. */
export async function currentSession(c: Context): Promise<ConsoleSession | null> {
  const ports = portsOf(c);
  const secret = await getSignedCookie(c, await consoleKey(ports), SESSION_COOKIE);
  if (!secret) return null;
  const row = await findConsoleSession({ ctx: serviceCtx(ports, 'anonymous'), input: { secret } });
  if (!row) return null;
  return { ...row, csrf: await csrfOf(ports, row.id) };
}

/** Whether the session is still live: what a long-lived SSE stream asks on every round. */
export async function sessionLive(ports: Ports, sessionId: string): Promise<boolean> {
  return await consoleSessionLive({ ctx: serviceCtx(ports, 'system'), input: { sessionId } });
}

/** Ends the session (sign-out) and clears its cookie. */
export async function endSession(c: Context, session: ConsoleSession): Promise<void> {
  const ctx = serviceCtx(portsOf(c), session.tokenId);
  await endConsoleSession({ ctx, input: { sessionId: session.id, workspaceId: session.workspaceId } });
  clearSessionCookie(c);
}

/** Clears the session cookie (after sign-out, or when the cookie names a session that is no longer live). */
export function clearSessionCookie(c: Context): void {
  deleteCookie(c, SESSION_COOKIE, { path: '/', secure: !isLoopback(c), httpOnly: true, sameSite: 'Strict' });
}
