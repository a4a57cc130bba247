import { z } from 'zod';
import { NodeEnv } from './node-env.js';
import { SECURITY_HEADERS } from '../api/http/security-headers.js';

/**
 * The Worker's bindings (wrangler.toml vars and secrets), which its Durable Objects get too. The timing overrides
 * are the Node entry's, so that one deployment note covers both.
 */
export const WorkerEnv = z.object({
  /** Neon (or any PostgreSQL behind a Neon-compatible WebSocket proxy). A secret: `wrangler secret put DATABASE_URL`. */
  DATABASE_URL: z.string().url(),
  /** `host:port/path` of a WebSocket-to-TCP proxy in front of a plain PostgreSQL; tests only. */
  NEON_WS_PROXY: z.string().min(1).optional(),
  /** URL of a stand-in for Neon's SQL-over-HTTP endpoint in front of a plain PostgreSQL; tests only. */
  NEON_SQL_ENDPOINT: z.string().url().optional(),
  LUNANEXA_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  ...NodeEnv.pick({
    LUNANEXA_HEARTBEAT_INTERVAL_MS: true,
    LUNANEXA_MACHINE_LIFETIME_MS: true,
    LUNANEXA_RUNTIME_TTL_MS: true,
    LUNANEXA_RUNTIME_GRACE_MS: true,
    LUNANEXA_STREAM_KEEPALIVE_MS: true,
    LUNANEXA_RECONCILE_INTERVAL_MS: true,
    // Runtime secrets' key (`wrangler secret put LUNANEXA_SECRET_KEY`); without it they cannot be used.
    LUNANEXA_SECRET_KEY: true,
    // The scrape credential of /metrics (`wrangler secret put LUNANEXA_METRICS_TOKEN`) and the management rate limit.
    LUNANEXA_METRICS_TOKEN: true,
    LUNANEXA_MANAGEMENT_RATE_LIMIT_PER_MINUTE: true,
    LUNANEXA_CONSOLE_SIGN_IN_PER_MINUTE: true,
    LUNANEXA_WORKLOAD_RETENTION_DAYS: true,
    LUNANEXA_TELEMETRY_SAMPLE_MS: true,
    LUNANEXA_TELEMETRY_RETENTION_HOURS: true,
    // One API token's share of a deployment's admission queue, as on Node.
    LUNANEXA_ADMISSION_TOKEN_SHARE: true,
  }).shape,
});
export type WorkerEnv = z.infer<typeof WorkerEnv>;

export type ParsedEnv = { ok: true; env: WorkerEnv } | { ok: false; variables: string[]; issues: { variable: string; code: string }[] };

/**
 * Parses the bindings. On failure it names the variables and what is wrong with them, never their values
 * (DATABASE_URL holds a password); a variable that is not there at all is `missing`, so that the answer says to
 * set it rather than fix it.
 */
export function parseWorkerEnv(raw: unknown): ParsedEnv {
  const parsed = WorkerEnv.safeParse(raw ?? {});
  if (parsed.success) return { ok: true, env: parsed.data };
  const given = (raw ?? {}) as Record<string, unknown>;
  const issues = parsed.error.issues.map((issue) => {
    const variable = String(issue.path[0] ?? '(env)');
    return { variable, code: given[variable] === undefined ? 'missing' : issue.code };
  });
  return { ok: false, variables: [...new Set(issues.map((i) => i.variable))], issues };
}

/**
 * Every request of an isolate without a usable environment: a 500 in the management envelope that says which
 * binding is missing (and how to set it) or invalid. Nothing is served without the store, not even /healthz.
 */
export function invalidEnvResponse(result: Extract<ParsedEnv, { ok: false }>): Response {
  const problems = result.variables.map((variable) => {
    const missing = result.issues.some((issue) => issue.variable === variable && issue.code === 'missing');
    if (!missing) return `${variable} is invalid`;
    return variable === 'DATABASE_URL' ? 'DATABASE_URL is not set (wrangler secret put DATABASE_URL)' : `${variable} is not set`;
  });
  const body = {
    error: {
      code: 'invalid_environment',
      message: `the Worker cannot serve: ${problems.join('; ')}`,
      requestId: crypto.randomUUID(),
      details: { variables: result.variables, issues: result.issues },
    },
  };
  return new Response(JSON.stringify(body), { status: 500, headers: { ...SECURITY_HEADERS, 'content-type': 'application/json' } });
}
