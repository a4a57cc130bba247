import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { ApiError } from '../../kernel/errors.js';
import { serviceCtx } from '../../dataplane/ports.js';
import { authenticateApiToken } from '../../services/api-tokens.js';
import { recordSignInFailure } from '../../services/console-sessions.js';
import { countSignInAttempt } from '../../services/rate-limit.js';
import { clientAddress } from '../http/node-io.js';
import { html, nothing } from './html.js';
import { layout, notice } from './layout.js';
import { checkSignInNonce, currentSession, endSession, issueSignInNonce, openSession, portsOf, type ConsoleEnv } from './session.js';
import { formFields, readForm, signedIn, SIGN_IN_PATH } from './guard.js';

const SignInForm = z.object({
  _csrf: z.string().optional(),
  token: z
    .string()
    .trim()
    .min(1, 'Paste an API token into the token field.')
    .max(512, 'That is not an API token: it is longer than any token this control plane issues.'),
});

const ENDED: Record<string, string> = {
  '1': 'Your session ended (it expired, or its API token was revoked). Sign in again.',
  out: 'You signed out.',
};

async function signInPage(c: Context, status: 200 | 400 | 401 | 403 | 429, message?: string) {
  const nonce = await issueSignInNonce(c);
  const ended = ENDED[c.req.query('ended') ?? ''];
  const body = html`<div class="sign-in panel">
  <h1>Sign in to the console</h1>
  <p class="lede">Use an API token of role viewer, operator or admin. The console opens a session of at most 12 hours, never
  longer than the token lives; revoking the token ends it at once.</p>
  ${message ? notice(message, 'error') : ended ? notice(ended) : nothing}
  <form method="post" action="${SIGN_IN_PATH}">
    <input type="hidden" name="_csrf" value="${nonce}">
    <label for="token">API token</label>
    <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required aria-describedby="token-hint">
    <p id="token-hint" class="field-hint">It starts with <span class="mono">lnx_</span>. <span class="mono">npm start</span> writes an
    admin token to <span class="mono">.lunanexa/admin.token</span>.</p>
    <p><button type="submit" class="primary">Sign in</button></p>
  </form>
</div>`;
  c.header('cache-control', 'no-store');
  return c.html(layout({ title: 'Sign in', session: null, body }).toString(), status);
}

/**
 * Records a refused sign-in, never the token: audited in the token's workspace when the token is known
 * (`console.sign-in-failed`), counted and logged (with the client's address) either way.
 */
async function signInFailed(c: Context, token: string): Promise<void> {
  const ports = portsOf(c);
  const reason = await recordSignInFailure({ ctx: serviceCtx(ports, 'anonymous'), input: { token } });
  ports.metrics.consoleSignInFailures.inc({ reason });
  ports.logger.warn({ reason, address: clientAddress(c), requestId: c.get('requestId') }, 'console sign-in refused');
}

/** `GET|POST /console/sign-in` and `POST /console/sign-out`. */
export function registerSignIn(app: Hono<ConsoleEnv>): void {
  app.get(SIGN_IN_PATH, async (c) => {
    if (await currentSession(c)) return c.redirect('/', 303);
    return await signInPage(c, 200);
  });

  app.post(SIGN_IN_PATH, async (c) => {
    const ports = portsOf(c);
    // Attempts per client address and minute, across instances, before anything else is looked at.
    const verdict = await countSignInAttempt(ports.store.db, { address: clientAddress(c), limit: ports.config.consoleSignInPerMinute });
    if (!verdict.ok) {
      c.header('retry-after', String(verdict.retryAfterS));
      return await signInPage(c, 429, `Too many sign-in attempts from this address. Try again in ${verdict.retryAfterS} s.`);
    }
    const fields = await formFields(c);
    // The form's own nonce (double submit) and this origin, before the token is even looked at.
    await checkSignInNonce(c, fields._csrf);
    const parsed = SignInForm.safeParse(fields);
    if (!parsed.success) return await signInPage(c, 400, parsed.error.issues[0]?.message ?? 'The form is not valid.');
    const ctx = serviceCtx(ports, 'anonymous');
    let actor;
    try {
      actor = await authenticateApiToken({ ctx, input: { token: parsed.data.token } });
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) throw error;
      await signInFailed(c, parsed.data.token);
      return await signInPage(c, 401, 'That API token is unknown, expired or revoked.');
    }
    if (actor.role === 'inference') {
      await signInFailed(c, parsed.data.token);
      return await signInPage(c, 403, 'Inference tokens cannot sign in to the console: they only call models. Use a viewer, operator or admin token.');
    }
    await openSession(c, actor);
    return c.redirect('/', 303);
  });

  app.post('/console/sign-out', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    await readForm(c, z.object({ _csrf: z.string() }), session);
    await endSession(c, session);
    return c.redirect(`${SIGN_IN_PATH}?ended=out`, 303);
  });
}
