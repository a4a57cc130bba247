import { z } from 'zod';

/** Names of templates, parameters and environment variables: no shell or path syntax can hide in them. */
export const TemplateName = z
  .string()
  .regex(/^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$/, 'lowercase letters, digits, dots, dashes and underscores, 1-64 characters');
export const ParamName = z.string().regex(/^[a-z][a-z0-9_]{0,62}$/, 'a lowercase identifier');
export const EnvName = z.string().regex(/^[A-Z][A-Z0-9_]{0,127}$/, 'an upper-case environment variable name');

/**
 * One typed parameter an operator fills in. Every value is checked against its type before it reaches an
 * argument; an argument is one argv element (no shell ever parses it), so a value cannot add arguments.
 */
export const TemplateParam = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('string'),
    /**
     * Regular expression (JavaScript, `u` flag) the whole value must match; written anchored, `^...$`. The default
     * takes names, tags and relative paths: no leading `/` and no `..` segment, so that an operator cannot point an
     * argument at any file of the node; a template that means to take paths declares a pattern of its own.
     */
    pattern: z.string().max(200).default('^(?!/)(?!(?:.*/)?\\.\\.(?:/|$))[A-Za-z0-9._/:-]{1,200}$'),
    default: z.string().max(1024).optional(),
    description: z.string().max(200).optional(),
  }),
  z.object({
    type: z.literal('integer'),
    min: z.number().int().default(0),
    max: z
      .number()
      .int()
      .default(2 ** 31 - 1),
    default: z.number().int().optional(),
    description: z.string().max(200).optional(),
  }),
  z.object({
    type: z.literal('number'),
    min: z.number().default(0),
    max: z.number().default(1e9),
    default: z.number().optional(),
    description: z.string().max(200).optional(),
  }),
  z.object({
    type: z.literal('boolean'),
    default: z.boolean().optional(),
    /**
     * A presence flag such as `--enforce-eager`: the argument that is exactly `{name}` becomes this flag when
     * the value is true and is left out when it is false. Without it the value is written `true` or `false`.
     */
    flag: z
      .string()
      .regex(/^--?[A-Za-z0-9][A-Za-z0-9-]{0,62}$/, 'an option such as --enforce-eager')
      .optional(),
    description: z.string().max(200).optional(),
  }),
]);
export type TemplateParam = z.infer<typeof TemplateParam>;

/**
 * Placeholders the agent fills at launch, never the operator: `{port}` (the loopback port it picked),
 * `{model_path}` (the verified artifact's local path), `{served_name}` (the deployment's model name),
 * `{gpu_indices}` (comma-separated indices it reserved), `{instance}` (the launch's random id),
 * `{runtime_token}` (the launch's random secret, which the agent sends as `Authorization: Bearer` on every call).
 */
export const AGENT_PLACEHOLDERS = ['port', 'model_path', 'served_name', 'gpu_indices', 'instance', 'runtime_token'] as const;

/**
 * Environment variables the agent sets for every runtime itself (its port, its reserved GPUs, its home, its
 * search path, its instance, the secret its callers must present): no template may let a deployment set them,
 * nor any `LUNANEXA_*` name.
 */
export const AGENT_ENV = ['PATH', 'HOME', 'PORT', 'CUDA_VISIBLE_DEVICES', 'LUNANEXA_RUNTIME_INSTANCE', 'LUNANEXA_RUNTIME_TOKEN'] as const;

/**
 * A runtime template (vLLM, llama.cpp, a custom server), registered by an admin: a fixed executable pinned
 * by digest, an argument template whose `{name}` placeholders are typed parameters or agent placeholders, the
 * environment variables the runtime may receive, and its health path. Operators choose a template and fill its
 * parameters; they never supply a command line.
 */
export const RuntimeTemplateSpec = z.object({
  description: z.string().max(500).default(''),
  /** Absolute path of the executable on the node. */
  executable: z.string().regex(/^\/[^\0]{1,4095}$/, 'an absolute path'),
  /** SHA-256 of the executable file: the agent refuses to start anything else. */
  executableSha256: z.string().regex(/^[0-9a-f]{64}$/),
  args: z.array(z.string().max(1024)).max(256),
  params: z.record(ParamName, TemplateParam).default({}),
  /** Environment variables a deployment may set for this runtime (values plain or from a runtime secret). */
  env: z.array(EnvName).max(64).default([]),
  healthPath: z
    .string()
    .regex(/^\/[A-Za-z0-9._~/-]{0,200}$/)
    .default('/health'),
  /**
   * Where the runtime serves its engine's Prometheus metrics (vLLM and llama.cpp's server: `/metrics`), which the
   * agent reads for its heartbeats (docs/telemetry.md); null: it serves none.
   */
  metricsPath: z
    .string()
    .regex(/^\/[A-Za-z0-9._~/-]{0,200}$/)
    .nullable()
    .default(null),
});
export type RuntimeTemplateSpec = z.infer<typeof RuntimeTemplateSpec>;

export const RuntimeTemplateView = RuntimeTemplateSpec.extend({ name: TemplateName, createdAt: z.string(), updatedAt: z.string() });
export type RuntimeTemplateView = z.infer<typeof RuntimeTemplateView>;

/** A value for a template's environment variable: given in the clear, or taken from a stored runtime secret. */
export const EnvValue = z.union([z.strictObject({ value: z.string().max(4096) }), z.strictObject({ secret: TemplateName })]);
export type EnvValue = z.infer<typeof EnvValue>;

/** One (template, environment variable) pair a runtime secret may feed: `runtime.env.<env>` of a deployment of `template`. */
export const SecretFeed = z.strictObject({ template: TemplateName, env: EnvName });
export type SecretFeed = z.infer<typeof SecretFeed>;

/**
 * A runtime secret's value, written by an admin and never read back through any API, and what it may feed. A
 * secret feeds only the pairs listed (set by the admin, not by whoever deploys): none when first written without
 * `feeds`; writing it again without `feeds` keeps the list it has.
 */
export const RuntimeSecretPut = z.object({ value: z.string().min(1).max(4096), feeds: z.array(SecretFeed).max(64).optional() });
export type RuntimeSecretPut = z.infer<typeof RuntimeSecretPut>;

/** What the API says about a runtime secret: its name, what it may feed and when it was written, never its value. */
export const RuntimeSecretView = z.object({ name: TemplateName, feeds: z.array(SecretFeed), createdAt: z.string(), updatedAt: z.string() });
export type RuntimeSecretView = z.infer<typeof RuntimeSecretView>;
