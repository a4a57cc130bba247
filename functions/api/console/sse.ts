import type { Context, Hono } from 'hono';
import { CONSOLE_EVENTS_VERSION, ConsoleView, type ConsoleEventData, type ConsoleEventName } from '../../../shared/contracts/console.js';
import type { AppEnv, Ports } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { openSse } from '../http/sse-out.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import { fleetFragment, loadFleet } from './fleet.js';
import { deploymentsFragment, loadDeployments } from './deployments.js';
import { loadRuns, runsFragment } from './runs.js';
import { loadRecentRequests, requestsFragment } from './requests.js';
import { portsOf, sessionLive, type ConsoleEnv, type ConsoleSession } from './session.js';
import { signedIn } from './guard.js';

/** A round every this often: the page is at most this stale. */
const LIVE_INTERVAL_MS = 1_500;
/** A comment at least this often, so that no proxy closes a stream whose view did not change. */
const KEEPALIVE_MS = 15_000;
/**
 * A stream ends after this long and the browser opens a new one (EventSource reconnects by itself): no stream
 * outlives a deploy of the control plane by much, and the session is looked at anew with the cookie.
 */
const MAX_STREAM_MS = 10 * 60_000;
/** Live console streams one instance serves at once; past it a page stays static (503 on the stream). */
const MAX_STREAMS = 200;
/**
 * Live streams one session may hold on one instance (tabs of one browser: an HTTP/1.1 browser opens at most six
 * connections to a host anyway). One more is refused 429 and its page stays static; the streams it has go on.
 */
const MAX_STREAMS_PER_SESSION = 6;
/** Live streams one API token may hold on one instance over all its sessions (a token signed in many times). */
const MAX_STREAMS_PER_TOKEN = 12;
let open = 0;
const perSession = new Map<string, number>();
const perToken = new Map<string, number>();

/** Live console streams this instance serves now (each ends when its client leaves or its session ends). */
export function liveConsoleStreams(): number {
  return open;
}

/** Refuses a stream past the instance's, the session's or the token's cap; otherwise counts it until `release`. */
function admitStream(session: ConsoleSession): () => void {
  if ((perSession.get(session.id) ?? 0) >= MAX_STREAMS_PER_SESSION)
    throw new ApiError(
      'rate_limit_exceeded',
      `there are already ${MAX_STREAMS_PER_SESSION} live pages open in this session; this page stays static (reload it once you closed another)`,
      { retryAfterS: Math.ceil(LIVE_INTERVAL_MS / 1000) },
    );
  if ((perToken.get(session.tokenId) ?? 0) >= MAX_STREAMS_PER_TOKEN)
    throw new ApiError(
      'rate_limit_exceeded',
      `there are already ${MAX_STREAMS_PER_TOKEN} live pages open with this token; this page stays static (reload it once you closed another)`,
      { retryAfterS: Math.ceil(LIVE_INTERVAL_MS / 1000) },
    );
  if (open >= MAX_STREAMS) throw new ApiError('unavailable', 'this control plane serves as many live console pages as it can; the page stays static');
  const add = (counts: Map<string, number>, key: string, by: number) => {
    const next = (counts.get(key) ?? 0) + by;
    if (next > 0) counts.set(key, next);
    else counts.delete(key);
  };
  open += 1;
  add(perSession, session.id, 1);
  add(perToken, session.tokenId, 1);
  return () => {
    open -= 1;
    add(perSession, session.id, -1);
    add(perToken, session.tokenId, -1);
  };
}

/**
 * Stands for the session's CSRF token in a shared render; each stream puts its own session's token in its place.
 * Random per process: rendered data is escaped and could not spell it anyway, and no one can guess it. Drawn on
 * first use: Workers allow no random values at a module's top level.
 */
let csrfSlot: string | undefined;
const CSRF_SLOT = () => (csrfSlot ??= `csrf-slot-${Buffer.from(crypto.getRandomValues(new Uint8Array(18))).toString('base64url')}`);

/**
 * The fragments of a view, rendered by the same functions as the page. What they show depends on the workspace
 * (the data) and the role (an operator's buttons and forms) and on nothing else of the session but its CSRF token,
 * which is left as `CSRF_SLOT()`: one render serves every stream of that view, workspace and role.
 */
async function fragments(view: ConsoleView, ports: Ports, session: ConsoleSession): Promise<Array<ConsoleEventData<'fragment'>>> {
  ports.metrics.consoleRenders.inc({ view });
  const shared: ConsoleSession = { ...session, csrf: CSRF_SLOT() };
  switch (view) {
    case 'fleet':
      return [{ target: 'fleet-live', html: fleetFragment(await loadFleet(ports, shared), shared).toString() }];
    case 'deployments':
      return [{ target: 'deployments-live', html: deploymentsFragment(await loadDeployments(ports, shared), shared).toString() }];
    case 'runs':
      return [{ target: 'runs-live', html: runsFragment(await loadRuns(ports, shared)).toString() }];
    case 'requests':
      return [{ target: 'requests-live', html: requestsFragment(await loadRecentRequests(ports, shared)).toString() }];
  }
}

/** The round a time falls in: every stream's rounds fall on the same ticks (multiples of `LIVE_INTERVAL_MS`). */
const tickOf = (ms: number): number => Math.round(ms / LIVE_INTERVAL_MS);

/** Until the next tick (a whole interval at least a third away), so that the streams' rounds meet on it. */
function untilNextTick(): number {
  const wait = LIVE_INTERVAL_MS - (Date.now() % LIVE_INTERVAL_MS);
  return wait < LIVE_INTERVAL_MS / 3 ? wait + LIVE_INTERVAL_MS : wait;
}

/** This tick's render of each (view, workspace, role), per app (its ports): a store's workspace ids are its own. */
const renders = new WeakMap<Ports, Map<string, { tick: number; rendered: Promise<Array<ConsoleEventData<'fragment'>>> }>>();

/**
 * The view's fragments for this session at `tick`: rendered once per tick for every stream of the same view,
 * workspace and role on this instance (however many streams, one render), with the session's CSRF token put in.
 */
async function sharedFragments(view: ConsoleView, ports: Ports, session: ConsoleSession, tick: number): Promise<Array<ConsoleEventData<'fragment'>>> {
  let byKey = renders.get(ports);
  if (!byKey) renders.set(ports, (byKey = new Map()));
  const key = JSON.stringify([view, session.workspaceId, session.role]);
  let entry = byKey.get(key);
  if (!entry || entry.tick !== tick) {
    const rendered = fragments(view, ports, session);
    const made = { tick, rendered };
    byKey.set(key, made);
    entry = made;
    // Dropped once no stream can ask for it any more; a failed render is not kept past its tick either.
    const forget = () => {
      const timer = setTimeout(() => {
        if (byKey.get(key) === made) byKey.delete(key);
      }, 2 * LIVE_INTERVAL_MS);
      timer.unref?.();
    };
    rendered.then(forget, forget);
  }
  const rendered = await entry.rendered;
  return rendered.map((fragment) => ({ target: fragment.target, html: fragment.html.replaceAll(CSRF_SLOT(), session.csrf) }));
}

/**
 * `GET /console/events?view=fleet|deployments|runs|requests`: the page's section as HTML fragments, sent when they
 * change (checked every `LIVE_INTERVAL_MS`). Each round first checks the session: once it ended (sign-out, expiry,
 * its token revoked) the stream says so and closes. It stops when the client leaves.
 */
export function registerEvents(app: Hono<ConsoleEnv>): void {
  app.get('/console/events', signedIn('viewer'), async (c) => {
    const view = ConsoleView.safeParse(c.req.query('view'));
    if (!view.success) throw new ApiError('validation_failed', 'view must be fleet, deployments, runs or requests');
    const session = c.get('session');
    const ports = portsOf(c);
    const release = admitStream(session);
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stop = () => {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      release();
    };
    const out = openSse(c as unknown as Context<AppEnv>, {}, stop);
    const started = Date.now();
    let sentAt = started;
    let failing = false;
    const sent = new Map<string, string>();
    const send = <N extends ConsoleEventName>(name: N, data: ConsoleEventData<N>) => {
      out.event(name, JSON.stringify(data));
      sentAt = Date.now();
    };
    send('hello', { v: CONSOLE_EVENTS_VERSION, view: view.data, intervalMs: LIVE_INTERVAL_MS });

    const round = async () => {
      const tick = tickOf(Date.now());
      try {
        if (!(await sessionLive(ports, session.id))) {
          send('session', { state: 'ended' });
          out.close();
          stop();
          return;
        }
        const rendered = await sharedFragments(view.data, ports, session, tick);
        if (stopped) return;
        if (failing) send('status', { ok: true, message: 'live again' });
        failing = false;
        for (const fragment of rendered) {
          if (sent.get(fragment.target) === fragment.html) continue;
          sent.set(fragment.target, fragment.html);
          send('fragment', fragment);
        }
      } catch (error) {
        if (stopped) return;
        if (!failing) ports.logger.warn({ err: errorFields(error), view: view.data }, 'console live round failed');
        failing = true;
        send('status', { ok: false, message: 'the control plane cannot reach its store; showing the last data' });
      }
      if (stopped) return;
      if (Date.now() - started >= MAX_STREAM_MS) {
        out.close();
        stop();
        return;
      }
      if (Date.now() - sentAt >= KEEPALIVE_MS) {
        out.comment('keep-alive');
        sentAt = Date.now();
      }
      timer = setTimeout(() => void round(), untilNextTick());
    };
    timer = setTimeout(() => void round(), untilNextTick());
    return out.response;
  });
}
