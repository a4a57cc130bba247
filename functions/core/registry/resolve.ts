import { createHash } from 'node:crypto';
import { canonicalize } from '../../../shared/canonical.js';
import type { RuntimeSpec } from '../../../shared/contracts/desired.js';
import type { DeploymentRuntime } from '../../../shared/contracts/deployment.js';
import type { RuntimeTemplateSpec, SecretFeed } from '../../../shared/contracts/runtime-template.js';
import { templateHash, type TemplateFields } from './template.js';
import { renderArgs, renderEnv, type RenderIssue } from './render.js';

/** The registered templates and secret versions a deployment's runtime resolves against. */
export interface RuntimeRegistry {
  template(workspaceId: string, name: string): RuntimeTemplateSpec | undefined;
  /** The current version of a runtime secret (changes whenever its value does); never the value. */
  secretVersion(workspaceId: string, name: string): string | undefined;
  /** The (template, env name) pairs a runtime secret may feed, as its admin listed them; none when it does not exist. */
  secretFeeds(workspaceId: string, name: string): readonly SecretFeed[];
}

export const EMPTY_REGISTRY: RuntimeRegistry = { template: () => undefined, secretVersion: () => undefined, secretFeeds: () => [] };

/** A registry over rows already read. */
export function registryOf(rows: {
  templates: ReadonlyArray<{ workspaceId: string; name: string; spec: RuntimeTemplateSpec }>;
  secrets: ReadonlyArray<{ workspaceId: string; name: string; version: string; feeds: readonly SecretFeed[] }>;
}): RuntimeRegistry {
  const key = (workspaceId: string, name: string) => `${workspaceId}\u0000${name}`;
  const templates = new Map(rows.templates.map((t) => [key(t.workspaceId, t.name), t.spec]));
  const secrets = new Map(rows.secrets.map((s) => [key(s.workspaceId, s.name), s]));
  return {
    template: (w, n) => templates.get(key(w, n)),
    secretVersion: (w, n) => secrets.get(key(w, n))?.version,
    secretFeeds: (w, n) => secrets.get(key(w, n))?.feeds ?? [],
  };
}

/**
 * Environment variables a replica takes from runtime secrets: kept beside the assignment's spec (never in the
 * spec the API or the hash sees) and decrypted only into the signed desired state (`secret-env.ts`).
 */
export type SecretEnvRefs = Record<string, { secret: string; version: string }>;

export interface ResolvedRuntime {
  /** What the signed assignment runs, secret values aside. */
  runtime: RuntimeSpec;
  secretEnv: SecretEnvRefs;
}

export type ResolveFailure = { ok: false; code: 'unknown_template' | 'unknown_secret' | 'validation_failed'; issues: RenderIssue[] };

/**
 * A deployment's runtime as a signed assignment carries it: the template's pinned executable, the argv rendered
 * with the deployment's params, its plain environment, and references to the secrets it names. Pure.
 */
export function resolveRuntime(input: {
  workspaceId: string;
  runtime: DeploymentRuntime;
  registry: RuntimeRegistry;
}): { ok: true; value: ResolvedRuntime } | ResolveFailure {
  const { workspaceId, runtime, registry } = input;
  if (runtime.kind === 'simulated') return { ok: true, value: { runtime, secretEnv: {} } };
  if (runtime.kind !== 'template') {
    // `runtime` is stored jsonb, typed but never parsed on read: a kind this build does not know (the removed
    // `process` runtime, whose live deployments migration 0003 retired) is refused by name, never read as a template.
    return {
      ok: false,
      code: 'validation_failed',
      issues: [{ path: 'runtime.kind', message: `runtime kind ${String((runtime as { kind: unknown }).kind)} is not supported: use a runtime template` }],
    };
  }
  const template = registry.template(workspaceId, runtime.template);
  if (!template)
    return { ok: false, code: 'unknown_template', issues: [{ path: 'runtime.template', message: `runtime template ${runtime.template} is not registered` }] };
  const args = renderArgs(template, runtime.params);
  const env = renderEnv(template, runtime.env);
  if (!args.ok || !env.ok) return { ok: false, code: 'validation_failed', issues: [...(args.ok ? [] : args.issues), ...(env.ok ? [] : env.issues)] };
  const secretEnv: SecretEnvRefs = {};
  for (const [name, secret] of Object.entries(env.value.secrets)) {
    const version = registry.secretVersion(workspaceId, secret);
    if (!version) return { ok: false, code: 'unknown_secret', issues: [{ path: `runtime.env.${name}`, message: `runtime secret ${secret} does not exist` }] };
    if (!secretFeeds(registry.secretFeeds(workspaceId, secret), runtime.template, name)) {
      return { ok: false, code: 'validation_failed', issues: [{ path: `runtime.env.${name}`, message: notFedMessage(secret, runtime.template, name) }] };
    }
    secretEnv[name] = { secret, version };
  }
  return {
    ok: true,
    value: {
      runtime: {
        kind: 'template',
        template: runtime.template,
        executable: template.executable,
        executableSha256: template.executableSha256,
        args: args.value,
        env: env.value.plain,
        healthPath: template.healthPath,
        ...(template.metricsPath === null ? {} : { metricsPath: template.metricsPath }),
      },
      secretEnv,
    },
  };
}

/** Whether a secret's feeds list (template, env name). Pure. */
export function secretFeeds(feeds: readonly SecretFeed[], template: string, env: string): boolean {
  return feeds.some((feed) => feed.template === template && feed.env === env);
}

/** Why a secret does not reach a variable: its admin did not list the pair (docs/security.md, runtime secrets). */
function notFedMessage(secret: string, template: string, env: string): string {
  return `runtime secret ${secret} may not feed ${env} of template ${template}: an admin lists what it feeds (PUT /runtime-secrets/${secret} with "feeds")`;
}

/**
 * The digest that decides rollouts: the template digest of the resolved replica (so a re-registered executable,
 * digest or argument list rolls the deployments that use it) and, when it takes secrets, their versions (so
 * rotating one rolls the replicas that use it) but never their values. Without secrets it is `templateHash`.
 */
export function replicaHash(fields: TemplateFields, secretEnv: SecretEnvRefs): string {
  const base = templateHash(fields);
  if (Object.keys(secretEnv).length === 0) return base;
  return createHash('sha256')
    .update(canonicalize({ template: base, secretEnv }))
    .digest('hex');
}
