import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { Role } from '../../../shared/contracts/common.js';
import { CreateApiTokenRequest, type ApiTokenCreated, type ApiTokenView } from '../../../shared/contracts/tokens.js';
import type { MemberView } from '../../../shared/contracts/tokens.js';
import { isId } from '../../../shared/ids.js';
import { serviceCtx } from '../../dataplane/ports.js';
import { ApiError, zodDetails } from '../../kernel/errors.js';
import { createApiToken, listApiTokens, revokeApiToken } from '../../services/api-tokens.js';
import { listMembers } from '../../services/members.js';
import { html, nothing, type Html } from './html.js';
import { badge, csrfField, layout, notice, when } from './layout.js';
import { portsOf, type ConsoleEnv, type ConsoleSession } from './session.js';
import { readForm, signedIn, SIGN_IN_PATH } from './guard.js';

/** Tokens listed on the page (creation order); the API pages through all of them. */
const LISTED = 200;

/** Lifetimes the form offers, in seconds (0: never expires). */
const LIFETIMES: ReadonlyArray<{ value: string; label: string; seconds: number | null }> = [
  { value: 'never', label: 'Never expires', seconds: null },
  { value: '1d', label: '1 day', seconds: 86_400 },
  { value: '7d', label: '7 days', seconds: 7 * 86_400 },
  { value: '30d', label: '30 days', seconds: 30 * 86_400 },
  { value: '90d', label: '90 days', seconds: 90 * 86_400 },
  { value: '365d', label: '1 year', seconds: 365 * 86_400 },
];

const optionalText = z
  .string()
  .trim()
  .transform((v) => (v === '' ? undefined : v));

/** The form as typed; then mapped to the API's own `CreateApiTokenRequest` and checked against it too. */
const CreateForm = z.object({
  _csrf: z.string(),
  name: z.string().trim().min(1, 'Give the token a name (what or who it is for).').max(100, 'The name is longer than 100 characters.'),
  role: Role,
  lifetime: z.enum(LIFETIMES.map((l) => l.value) as [string, ...string[]], { message: 'Pick a lifetime from the list.' }),
  member: optionalText.optional(),
  models: optionalText.optional(),
  rateLimitPerMinute: optionalText
    .optional()
    .refine((v) => v === undefined || /^\d{1,7}$/.test(v), 'The rate limit must be a whole number of requests per minute (1 to 1,000,000), or empty.'),
});

const RevokeForm = z.object({ _csrf: z.string() });

/** A token's state in the colours of the machine states it reads like. */
function tokenBadge(state: string): Html {
  return badge(state === 'active' ? 'ready' : state === 'expired' ? 'stale' : 'revoked', state);
}

function tokenRow(t: ApiTokenView, session: ConsoleSession, names: ReadonlyMap<string, string>): Html {
  const own = t.id === session.tokenId;
  return html`<tr data-token="${t.name}" data-state="${t.state}">
    <th scope="row">${t.name}${own ? html` <span class="small muted">(this session)</span>` : nothing}<br><span class="small muted mono">${t.id}</span></th>
    <td data-label="Role">${t.role}</td>
    <td data-label="State">${tokenBadge(t.state)}</td>
    <td data-label="Member">${t.member ? t.member.name : html`<span class="muted">–</span>`}</td>
    <td data-label="Limits">${t.role === 'inference' ? html`${t.models ? html`<span class="mono">${t.models.join(', ')}</span>` : 'all models'}<br><span class="small muted">${t.rateLimitPerMinute === null ? 'no rate limit' : `${t.rateLimitPerMinute}/min`}</span>` : html`<span class="muted">–</span>`}</td>
    <td data-label="Created">${when(t.createdAt)}<br><span class="small muted">by ${t.createdBy === null ? 'another workspace' : names.has(t.createdBy) ? names.get(t.createdBy) : html`<span class="mono">${t.createdBy}</span>`}</span></td>
    <td data-label="Expires">${t.expiresAt ? when(t.expiresAt) : html`<span class="muted">never</span>`}</td>
    <td data-label="Actions">${
      t.state === 'active'
        ? html`<form method="post" action="/console/tokens/${t.id}/revoke" class="inline" data-confirm="${own ? `Revoke ${t.name}? It is the token of this session: you will be signed out.` : `Revoke ${t.name}? Every request with it is refused from now on.`}">
        ${csrfField(session)}
        <button type="submit" class="danger" id="revoke-${t.id}">Revoke<span class="vh"> ${t.name}</span></button>
      </form>`
        : t.revokedAt
          ? html`<span class="small muted">revoked ${when(t.revokedAt)}</span>`
          : nothing
    }</td>
  </tr>`;
}

function createForm(session: ConsoleSession, members: readonly MemberView[]): Html {
  return html`<form method="post" action="/console/tokens" class="panel" aria-labelledby="create-title">
  <h2 id="create-title">Create a token</h2>
  ${csrfField(session)}
  <label for="token-name">Name</label>
  <input id="token-name" name="name" type="text" required maxlength="100" autocomplete="off" aria-describedby="token-name-hint">
  <p id="token-name-hint" class="field-hint">What or who it is for, e.g. <span class="mono">moongate-prod</span>.</p>
  <label for="token-role">Role</label>
  <select id="token-role" name="role" aria-describedby="token-role-hint">
    ${(['viewer', 'operator', 'admin', 'inference'] as const).map((r) => html`<option value="${r}"${r === 'inference' ? html` selected` : nothing}>${r}</option>`)}
  </select>
  <p id="token-role-hint" class="field-hint">inference calls models only; viewer sees the fleet; operator also deploys, scales and drains; admin also manages tokens.</p>
  <label for="token-lifetime">Lifetime</label>
  <select id="token-lifetime" name="lifetime">${LIFETIMES.map((l) => html`<option value="${l.value}"${l.value === '90d' ? html` selected` : nothing}>${l.label}</option>`)}</select>
  ${
    members.length > 0
      ? html`<label for="token-member">Issued to</label>
  <select id="token-member" name="member" aria-describedby="token-member-hint"><option value="">no member</option>${members.map((m) => html`<option value="${m.id}">${m.name} (${m.role})</option>`)}</select>
  <p id="token-member-hint" class="field-hint">Its role may not exceed the member's; removing the member revokes it.</p>`
      : nothing
  }
  <fieldset>
    <legend>Inference tokens only</legend>
    <label for="token-models">Models</label>
    <input id="token-models" name="models" type="text" autocomplete="off" aria-describedby="token-models-hint">
    <p id="token-models-hint" class="field-hint">Deployment names it may call, separated by commas; empty: every model of the workspace.</p>
    <label for="token-rate">Rate limit (requests per minute)</label>
    <input id="token-rate" name="rateLimitPerMinute" type="number" min="1" max="1000000" step="1" inputmode="numeric" aria-describedby="token-rate-hint">
    <p id="token-rate-hint" class="field-hint">Across every instance; empty: unlimited.</p>
  </fieldset>
  <p><button type="submit" class="primary" id="create-token">Create token</button></p>
</form>`;
}

async function tokensPage(c: Context<ConsoleEnv>, extra: { created?: ApiTokenCreated; message?: string }): Promise<Response> {
  const session = c.get('session');
  const ports = portsOf(c);
  const ctx = serviceCtx(ports, session.tokenId);
  const page = await listApiTokens({ ctx, input: { workspaceId: session.workspaceId, limit: LISTED } });
  const members = await listMembers({ ctx, input: { workspaceId: session.workspaceId, limit: LISTED } });
  const revoked = c.req.query('done') === 'revoke' ? page.items.find((t) => t.id === c.req.query('token')) : undefined;
  const created = extra.created;
  const names = new Map(page.items.map((t) => [t.id, t.name]));
  const body = html`<h1>API tokens</h1>
<p class="lede">Tokens of this workspace. A secret is shown once, when the token is created; only its SHA-256 is kept.</p>
${notice(extra.message)}
${revoked ? notice(`Revoked ${revoked.name}: every request with it is refused from now on.`) : nothing}
${
  created
    ? html`<section class="panel" aria-labelledby="created-title" id="created-token">
  <h2 id="created-title">Token ${created.name} created</h2>
  <p role="status">Copy the secret now: it is shown this once and cannot be read again.</p>
  <label for="new-token-secret">Secret of ${created.name} (${created.role})</label>
  <input id="new-token-secret" class="secret" type="text" readonly value="${created.token}" autocomplete="off" spellcheck="false">
</section>`
    : nothing
}
<div class="table-wrap">
<table class="grid" id="tokens">
  <caption>Tokens, oldest first${page.more ? ` (the first ${LISTED}; GET /api/v1/tokens lists them all)` : ''}</caption>
  <thead><tr><th scope="col">Name</th><th scope="col">Role</th><th scope="col">State</th><th scope="col">Member</th><th scope="col">Models and limit</th>
    <th scope="col">Created</th><th scope="col">Expires</th><th scope="col">Actions</th></tr></thead>
  <tbody>${page.items.map((t) => tokenRow(t, session, names))}</tbody>
</table>
</div>
${createForm(session, members.items)}`;
  return c.html(layout({ title: 'API tokens', session, active: 'tokens', body }).toString(), created ? 201 : 200);
}

/** `GET /console/tokens`, `POST /console/tokens` (create: the answer shows the secret once), `POST /console/tokens/{id}/revoke`. */
export function registerTokens(app: Hono<ConsoleEnv>): void {
  // Tokens are credentials: admin only, as on the API (`functions/api/management/tokens.ts`).
  app.get('/console/tokens', signedIn('admin'), async (c) => await tokensPage(c, {}));

  app.post('/console/tokens', signedIn('admin'), async (c) => {
    const session = c.get('session');
    const form = await readForm(c, CreateForm, session);
    const lifetime = LIFETIMES.find((l) => l.value === form.lifetime)!;
    const models = form.models
      ?.split(',')
      .map((m) => m.trim())
      .filter((m) => m.length > 0);
    // The API's own contract, so the console accepts exactly what `POST /api/v1/tokens` does.
    const request = CreateApiTokenRequest.safeParse({
      name: form.name,
      role: form.role,
      ...(lifetime.seconds === null ? {} : { ttlSeconds: lifetime.seconds }),
      ...(form.member === undefined ? {} : { memberId: form.member }),
      ...(models === undefined || models.length === 0 ? {} : { models }),
      ...(form.rateLimitPerMinute === undefined ? {} : { rateLimitPerMinute: Number(form.rateLimitPerMinute) }),
    });
    if (!request.success) {
      const first = request.error.issues[0];
      const field = first?.path.join('.') || 'form';
      throw new ApiError('validation_failed', `${field}: ${first?.message ?? 'not valid'}`, zodDetails(request.error));
    }
    const created = await createApiToken({
      ctx: serviceCtx(portsOf(c), session.tokenId),
      input: { ...request.data, workspaceId: session.workspaceId, creatorRole: session.role },
    });
    return await tokensPage(c, { created });
  });

  app.post('/console/tokens/:id/revoke', signedIn('admin'), async (c) => {
    const session = c.get('session');
    await readForm(c, RevokeForm, session);
    const tokenId = c.req.param('id');
    if (!isId('token', tokenId)) throw new ApiError('not_found', `there is no token ${tokenId}`);
    await revokeApiToken({ ctx: serviceCtx(portsOf(c), session.tokenId), input: { workspaceId: session.workspaceId, tokenId } });
    // Revoking the session's own token ends the session with it.
    if (tokenId === session.tokenId) return c.redirect(`${SIGN_IN_PATH}?ended=1`, 303);
    return c.redirect(`/console/tokens?done=revoke&token=${encodeURIComponent(tokenId)}`, 303);
  });
}
