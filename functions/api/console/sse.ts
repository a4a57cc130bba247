import type { Context, Hono } from 'hono';
import { CONSOLE_EVENTS_VERSION, ConsoleView, type ConsoleEventData, type ConsoleEventName } from '../../../shared/contracts/console.js';
import type { AppEnv, Ports } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { openSse } from '../http/sse-out.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import { fleetFragment, loadFleet } from './fleet.js';
import { deploymentsFragment, loadDeployments } from './deployments.js';
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
let open = 0;

/** Live console streams this instance serves now (each ends when its client leaves or its session ends). */
export function liveConsoleStreams(): number {
  return open;
}

/** The fragments of a view, rendered by the same functions as the page. */
async function fragments(view: ConsoleView, ports: Ports, session: ConsoleSession): Promise<Array<ConsoleEventData<'fragment'>>> {
  switch (view) {
    case 'fleet':
      return [{ target: 'fleet-live', html: fleetFragment(await loadFleet(ports, session), session).toString() }];
    case 'deployments':
      return [{ target: 'deployments-live', html: deploymentsFragment(await loadDeployments(ports, session), session).toString() }];
    case 'requests':
      return [{ target: 'requests-live', html: requestsFragment(await loadRecentRequests(ports, session)).toString() }];
  }
}

/**
 * `GET /console/events?view=fleet|deployments|requests`: the page's section as HTML fragments, sent when they
 * change (checked every `LIVE_INTERVAL_MS`). Each round first checks the session: once it ended (sign-out, expiry,
 * its token revoked) the stream says so and closes. It stops when the client leaves.
 */
export function registerEvents(app: Hono<ConsoleEnv>): void {
  app.get('/console/events', signedIn('viewer'), async (c) => {
    const view = ConsoleView.safeParse(c.req.query('view'));
    if (!view.success) throw new ApiError('validation_failed', 'view must be fleet, deployments or requests');
    if (open >= MAX_STREAMS) throw new ApiError('unavailable', 'this control plane serves as many live console pages as it can; the page stays static');
    const session = c.get('session');
    const ports = portsOf(c);
    open += 1;
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stop = () => {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      open -= 1;
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
      try {
        if (!(await sessionLive(ports, session.id))) {
          send('session', { state: 'ended' });
          out.close();
          stop();
          return;
        }
        const rendered = await fragments(view.data, ports, session);
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
      timer = setTimeout(() => void round(), LIVE_INTERVAL_MS);
    };
    timer = setTimeout(() => void round(), LIVE_INTERVAL_MS);
    return out.response;
  });
}
