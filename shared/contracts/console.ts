import { z } from 'zod';

/** Version of the console's SSE catalogue; sent in `hello`, so a page built for another one reloads. */
export const CONSOLE_EVENTS_VERSION = 1;

/** The live views of the console: what `GET /console/events?view=` streams. */
export const ConsoleView = z.enum(['fleet', 'deployments', 'runs', 'requests']);
export type ConsoleView = z.infer<typeof ConsoleView>;

/**
 * The SSE catalogue of `GET /console/events`: event name -> data schema. A `fragment` replaces the content of the
 * element whose id is `target` with HTML the server rendered with the same functions as the page itself.
 */
const ConsoleEvents = {
  hello: z.object({ v: z.number().int(), view: ConsoleView, intervalMs: z.number().int().positive() }),
  fragment: z.object({ target: z.string().regex(/^[a-z][a-z0-9-]{0,63}$/), html: z.string() }),
  /** The store did not answer this round; the page keeps what it shows and says so. */
  status: z.object({ ok: z.boolean(), message: z.string() }),
  /** The session ended (signed out, expired, or its API token revoked): the page goes to the sign-in form. */
  session: z.object({ state: z.literal('ended') }),
} as const;
export type ConsoleEventName = keyof typeof ConsoleEvents;
export type ConsoleEventData<N extends ConsoleEventName> = z.infer<(typeof ConsoleEvents)[N]>;
