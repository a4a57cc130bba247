import { Hono } from 'hono';
import { limitBody } from '../http/body-limit.js';
import { registerAssets } from './assets.js';
import { errorPage, handleConsoleError } from './error-page.js';
import { registerSignIn } from './sign-in.js';
import { registerFleet } from './fleet.js';
import { registerDeployments } from './deployments.js';
import { registerRuns } from './runs.js';
import { registerJobs } from './jobs.js';
import { registerRequests } from './requests.js';
import { registerTokens } from './tokens.js';
import { registerUsage } from './usage.js';
import { registerAudit } from './audit.js';
import { registerEvents } from './sse.js';
import type { ConsoleEnv } from './session.js';

/** A console form is a few short fields; anything larger is refused before it is read. */
const MAX_FORM_BYTES = 16 * 1024;

/**
 * The web console (docs/console.md), mounted at `/`: server-rendered pages at `/` and `/console/...`, live over
 * SSE (`/console/events`), signed in with an API token. It owns no other path: mounted at the root, a middleware
 * on `*` here would run for the API too, so every one names its paths.
 */
export function consoleApp(): Hono<ConsoleEnv> {
  const app = new Hono<ConsoleEnv>();
  app.onError(handleConsoleError);
  app.post('/console/*', limitBody(MAX_FORM_BYTES));
  registerAssets(app);
  registerSignIn(app);
  registerFleet(app);
  registerDeployments(app);
  registerRuns(app);
  registerJobs(app);
  registerRequests(app);
  registerTokens(app);
  registerUsage(app);
  registerAudit(app);
  registerEvents(app);
  app.get('/console', (c) => c.redirect('/', 303));
  app.all('/console/*', (c) => errorPage(c, 404, `There is no console page at ${c.req.path}.`));
  return app;
}
