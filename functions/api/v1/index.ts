import { Hono } from 'hono';
import { ChatCompletionRequest, CompletionRequest, EmbeddingRequest, type ModelList } from '../../../shared/contracts/openai.js';
import type { InferencePath } from '../../../shared/contracts/relay.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { clientGone } from '../http/node-io.js';
import { bearer } from '../http/api-auth.js';
import { authenticateApiToken } from '../../services/api-tokens.js';
import { countTokenRequest } from '../../services/rate-limit.js';
import { modelAllowed } from '../../core/token-rules.js';
import { executeInference } from '../../dataplane/execute.js';
import { ApiError } from '../../kernel/errors.js';
import { handleOpenAIError, OpenAIError } from './errors.js';
import { filesApi } from './files.js';
import { batchesApi } from './batches.js';
import { jobRunnerApi } from './job-runner.js';
import { inferenceResponse } from './respond.js';
import { parseBody } from './body.js';
import { resolveDeadline } from './deadline.js';

/** The OpenAI-compatible consumer surface `/v1` (docs/design.md section 5). */
export function inferenceApi(maxBodyBytes: number): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.onError(handleOpenAIError);
  // Bodies are read (and limited) by the handlers themselves, after authentication: see parseBody.
  app.use('*', async (c, next) => {
    const ports = c.get('ports');
    let token: string;
    try {
      token = bearer(c.req.header('authorization'));
    } catch {
      throw new OpenAIError(401, 'authentication_error', 'missing_api_key', 'You did not provide an API key: send Authorization: Bearer <token>.');
    }
    const actor = await authenticateApiToken({ ctx: serviceCtx(ports, 'anonymous'), input: { token, cache: ports.caches.tokens ?? undefined } }).catch(
      (error: unknown) => {
        // Only a refused token is the client's fault; a store that cannot answer is ours (500), not a 401.
        if (error instanceof ApiError) throw new OpenAIError(401, 'authentication_error', 'invalid_api_key', 'Incorrect API key provided.');
        throw error;
      },
    );
    if (actor.rateLimitPerMinute !== null) {
      // On Workers a single statement goes over Neon's HTTP endpoint rather than a connection of the request's own.
      const verdict = await countTokenRequest(ports.store.statements ?? ports.store.db, { tokenId: actor.tokenId, limit: actor.rateLimitPerMinute });
      if (!verdict.ok) {
        throw new OpenAIError(
          429,
          'rate_limit_error',
          'rate_limit_exceeded',
          `Rate limit of ${actor.rateLimitPerMinute} requests per minute reached for this API key; retry in ${verdict.retryAfterS} s.`,
          null,
          {
            'Retry-After': String(verdict.retryAfterS),
          },
        );
      }
    }
    c.set('actor', actor);
    await next();
  });

  app.get('/models', async (c) => {
    const ports = c.get('ports');
    await ports.dataPlane.routing.fresh();
    const { workspaceId, models } = c.get('actor');
    const deployments = ports.dataPlane.routing.list(workspaceId).map((route) => ({ id: route.name, route }));
    const named = new Set(deployments.map((d) => d.id));
    // An alias is a model name too (a deployment's own name wins, as it does in routing).
    const aliases = ports.dataPlane.routing.aliasRoutes(workspaceId).flatMap(({ alias, route }) => (named.has(alias) ? [] : [{ id: alias, route }]));
    const body: ModelList = {
      object: 'list',
      data: [...deployments, ...aliases]
        .filter(({ id }) => modelAllowed(models, id))
        .sort((a, b) => (a.id < b.id ? -1 : 1))
        .map(({ id, route }) => ({ id, object: 'model', created: Math.floor(route.createdAt.getTime() / 1000), owned_by: 'lunanexa' })),
    };
    return c.json(body);
  });

  const inference = <S extends typeof ChatCompletionRequest | typeof CompletionRequest | typeof EmbeddingRequest>(
    path: InferencePath,
    kind: 'chat' | 'completions' | 'embeddings',
    schema: S,
  ) =>
    app.post(path.slice('/v1'.length), async (c) => {
      const ports = c.get('ports');
      const startedAt = performance.now();
      const body = (await parseBody(c, schema, maxBodyBytes)) as Record<string, unknown> & { model: string; stream?: boolean; timeout?: number };
      const { maxDeadlineMs } = ports.config;
      const resolved = resolveDeadline({
        header: c.req.header('x-lunanexa-deadline'),
        timeoutS: body.timeout,
        now: Date.now(),
        defaultMs: ports.config.defaultDeadlineMs,
        maxMs: maxDeadlineMs,
      });
      if (!resolved.ok && resolved.reason === 'past')
        throw new OpenAIError(400, 'invalid_request_error', 'deadline_exceeded', 'the request deadline has already passed');
      if (!resolved.ok) {
        const max = maxDeadlineMs / 1000;
        throw new OpenAIError(
          400,
          'invalid_request_error',
          'invalid_deadline',
          `X-LunaNexa-Deadline must be an ISO-8601 time or integer epoch milliseconds at most ${max} s ahead (up to a day further is clamped to ${max} s)`,
        );
      }
      const { deadline } = resolved;
      const idempotencyKey = c.req.header('idempotency-key') ?? null;
      if (idempotencyKey !== null && (idempotencyKey.length === 0 || idempotencyKey.length > 256)) {
        throw new OpenAIError(400, 'invalid_request_error', 'invalid_idempotency_key', 'Idempotency-Key must be 1-256 characters');
      }
      const laneHeader = c.req.header('x-lunanexa-lane');
      if (laneHeader !== undefined && laneHeader !== 'batch' && laneHeader !== 'interactive') {
        throw new OpenAIError(400, 'invalid_request_error', 'invalid_lane', 'X-LunaNexa-Lane must be batch or interactive');
      }
      const { timeout: _timeout, ...forward } = body;
      const result = await executeInference(ports, {
        actor: c.get('actor'),
        path,
        kind,
        model: body.model,
        body: forward,
        stream: kind !== 'embeddings' && body.stream === true,
        deadline,
        idempotencyKey,
        signal: clientGone(c),
        startedAt,
        // Anyone may put their own request behind interactive traffic; nobody can put it ahead.
        lane: laneHeader === 'batch' ? 'batch' : 'interactive',
      });
      return inferenceResponse(c, result);
    });
  inference('/v1/chat/completions', 'chat', ChatCompletionRequest);
  inference('/v1/completions', 'completions', CompletionRequest);
  inference('/v1/embeddings', 'embeddings', EmbeddingRequest);
  app.route('/files', filesApi());
  app.route('/batches', batchesApi());
  app.route('/jobs', jobRunnerApi());
  return app;
}
