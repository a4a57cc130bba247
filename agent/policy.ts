import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { z } from 'zod';
import type { Assignment, TemplateRuntime } from '../shared/contracts/desired.js';
import { EnvName, TemplateName } from '../shared/contracts/runtime-template.js';
import { versionProblem } from './artifacts/layout.js';
import { codeLoadingEnvReason } from '../shared/env-deny.js';

/**
 * Variables the agent sets for every runtime itself: a policy cannot let an assignment set them, so that no
 * assignment redirects a runtime's binaries (PATH), its port or its GPUs.
 */
export const AGENT_SET_ENV: readonly string[] = ['PATH', 'HOME', 'PORT', 'LUNANEXA_RUNTIME_INSTANCE', 'CUDA_VISIBLE_DEVICES'];

const AbsolutePath = z
  .string()
  .regex(/^\/[^\0]{0,4095}$/, 'an absolute path')
  .refine((path) => posix.normalize(path) === path && (path === '/' || !path.endsWith('/')), 'a normalized path (no "..", "." or trailing slash)');

/** A user or group name as the system's tools take it. */
const PosixName = z.string().regex(/^[a-z_][a-z0-9_.-]{0,31}$/, 'a user or group name');

/** The highest uid or gid a runtime may get: Node takes ids as signed 32-bit integers. */
const MAX_UID = 2 ** 31 - 1;
/** More runtimes than one node runs at once. */
const MAX_RUNTIME_UIDS = 4096;

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, '64 lowercase hexadecimal digits');

/**
 * A template this node accepts: the executable it must be, optionally its pinned digest and its argv, the variables
 * it may receive. Without an argv pin the arguments are the control plane admin's to choose: for an interpreter
 * (python3, node, bash) or a runtime that loads code (vllm with --trust-remote-code), that is any code.
 */
const TemplatePolicy = z
  .object({
    executable: AbsolutePath,
    /** When set, the control plane's template must pin this very digest (the template's `executableSha256`). */
    executableSha256: Sha256.optional(),
    /** The former name of `executableSha256`, still read; when both are given they must be equal. */
    sha256: Sha256.optional(),
    /**
     * When set, the assignment's argv must be exactly this list, as the template renders it with the deployment's
     * params (the agent's own placeholders, `{port}` and the like, still unfilled).
     */
    args: z
      .array(
        z
          .string()
          .max(4096)
          .refine((arg) => !arg.includes('\0'), 'no NUL'),
      )
      .max(256)
      .optional(),
    /** When set, the SHA-256 of the assignment's argv (`argvDigest`) must be one of these. */
    argvSha256: z.array(Sha256).min(1).max(64).optional(),
    env: z
      .array(EnvName.refine((name) => !AGENT_SET_ENV.includes(name), 'set by the agent itself'))
      .max(64)
      .default([]),
  })
  .strict()
  .refine((t) => t.sha256 === undefined || t.executableSha256 === undefined || t.sha256 === t.executableSha256, {
    message: 'sha256 (the former name of executableSha256) and executableSha256 differ',
    path: ['sha256'],
  });

/**
 * The digest a policy's `argvSha256` pins: SHA-256 (hex) of the argv as compact JSON (`JSON.stringify(args)`, UTF-8),
 * the argv as the assignment carries it (params rendered, the agent's placeholders unfilled). Pure.
 */
export function argvDigest(args: readonly string[]): string {
  return createHash('sha256').update(JSON.stringify(args), 'utf8').digest('hex');
}

/** Where and within what the agent caches registry versions' files (docs/agent-cache.md). */
export const CacheSettings = z
  .object({
    /** Defaults to `<state dir>/cache`, which only runtimes running as the agent's own user can read. */
    dir: AbsolutePath.refine((path) => path !== '/', 'not the root directory').optional(),
    /** What the cache may hold; least recently used versions no assignment needs are evicted to stay within. */
    maxBytes: z
      .number()
      .int()
      .positive()
      .default(200 * 1024 ** 3),
    /** A download that receives no byte for this long fails (and is resumed by the next try). */
    stallSeconds: z
      .number()
      .positive()
      .max(24 * 3600)
      .default(120),
  })
  .strict();
export type CacheSettings = z.infer<typeof CacheSettings>;

/** The policy's cache settings, with the defaults for a policy that names none. Pure. */
export function cacheSettings(policy: AgentPolicy): CacheSettings {
  return policy.cache ?? CacheSettings.parse({});
}

/**
 * The node's local policy (`/etc/lunanexa/agent.json` by default), written by whoever administers the machine:
 * the control plane's signature says an assignment comes from the control plane, this file says whether this node
 * runs it. Unknown keys are errors, so that a misspelt setting never passes for a missing one.
 */
export const AgentPolicy = z
  .object({
    /** Accepted templates, by name. */
    templates: z.record(TemplateName, TemplatePolicy).default({}),
    /** Whether the built-in simulated runtime (`lunanexa-agent sim-runtime`) may run. */
    simulated: z.boolean().default(false),
    /** Directories artifacts must resolve into (after every symbolic link). `/` is not one: it holds /etc/shadow and /dev. */
    artifactRoots: z
      .array(AbsolutePath.refine((path) => path !== '/', 'not the root directory'))
      .max(64)
      .default([]),
    /**
     * Who runtimes run as when the agent runs as root (which it must, for runtimes not to read its key): `uids`, a
     * range of uids that is the agent's own (each runtime gets one of them, so no runtime reads another's environment
     * or signals it), or `user`, one user that every runtime shares.
     */
    runAs: z
      .object({
        user: PosixName.optional(),
        uids: z
          .object({
            first: z.number().int().min(1).max(MAX_UID),
            count: z.number().int().min(1).max(MAX_RUNTIME_UIDS),
          })
          .strict()
          .refine((range) => range.first + range.count - 1 <= MAX_UID, `a range that ends by uid ${MAX_UID}`)
          .optional(),
        /**
         * The group runtimes run in: a group name or a gid. Defaults to `user`'s primary group; required with `uids`,
         * whose runtimes share it (files every runtime must read can be given to it).
         */
        group: z.union([PosixName, z.number().int().min(1).max(MAX_UID)]).optional(),
      })
      .strict()
      .refine((runAs) => (runAs.user === undefined) !== (runAs.uids === undefined), 'either user (one user for every runtime) or uids (one uid per runtime)')
      .refine((runAs) => runAs.uids === undefined || runAs.group !== undefined, { message: 'uids needs a group', path: ['group'] })
      .optional(),
    /** Bounds of the agent's own reads of an artifact (to verify its digest). */
    artifactLimits: z
      .object({
        maxBytes: z
          .number()
          .int()
          .positive()
          .default(256 * 1024 ** 3),
        maxSeconds: z.number().positive().default(3600),
      })
      .strict()
      .prefault({}),
    /** The cache of registry versions' files (docs/agent-cache.md); absent: `cacheSettings`' defaults. */
    cache: CacheSettings.optional(),
  })
  .strict();
export type AgentPolicy = z.infer<typeof AgentPolicy>;

/** What a node runs without a policy file: nothing. */
export const DENY_ALL: AgentPolicy = AgentPolicy.parse({});

/** True when the policy lets no runtime at all run. */
export function allowsNothing(policy: AgentPolicy): boolean {
  return !policy.simulated && Object.keys(policy.templates).length === 0;
}

/**
 * Variables the platform sets for a run's worker (docs/runs.md): its rank and the rendezvous the control plane gives
 * (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and its GPUs, which the agent sets itself. A worker's
 * command may carry them whatever its template's `env` list says: they say where in its run it is, never what it runs.
 */
export const WORKER_PLATFORM_ENV: readonly string[] = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES'];

/**
 * Why the local policy refuses a template's launch (a runtime's or a run worker's), or null when it accepts it:
 * the template must be allowed by name, run its executable with its pinned digest and argv, and set only the
 * variables its `env` lists, besides `platformEnv` (a worker's `WORKER_PLATFORM_ENV`). Pure.
 */
export function templateRefusal(policy: AgentPolicy, runtime: TemplateRuntime, platformEnv: readonly string[] = []): string | null {
  // Own keys only: a template named "constructor" must not find Object.prototype's.
  const allowed = Object.hasOwn(policy.templates, runtime.template) ? policy.templates[runtime.template] : undefined;
  if (!allowed) return `template "${runtime.template}" is not allowed`;
  if (runtime.executable !== allowed.executable) return `template "${runtime.template}" must run ${allowed.executable}, not ${runtime.executable}`;
  const digest = allowed.executableSha256 ?? allowed.sha256;
  if (digest !== undefined && digest !== runtime.executableSha256) {
    return `template "${runtime.template}" pins executable digest ${runtime.executableSha256}, not the ${digest} of the local policy`;
  }
  const exact = allowed.args === undefined || (allowed.args.length === runtime.args.length && allowed.args.every((arg, i) => arg === runtime.args[i]));
  const argv = argvDigest(runtime.args);
  if (!exact || (allowed.argvSha256 !== undefined && !allowed.argvSha256.includes(argv))) {
    return `template "${runtime.template}" runs arguments the local policy does not pin (argv digest ${argv})`;
  }
  const names = Object.keys(runtime.env)
    .filter((name) => !platformEnv.includes(name))
    .sort();
  const refused = names.find((name) => !allowed.env.includes(name));
  if (refused !== undefined) return `template "${runtime.template}" may not set environment variable ${refused}`;
  // Listed by the policy, and still never passed on: the control plane refuses these too.
  for (const name of names) {
    const reason = name.startsWith('LUNANEXA_') ? 'the agent sets its own variables itself' : codeLoadingEnvReason(name);
    if (reason !== null) return `template "${runtime.template}" may not set environment variable ${name}: ${reason}`;
  }
  return null;
}

/**
 * Why the local policy refuses what an assignment runs, or null when it accepts it. Pure: the checks that need the
 * disk (the executable's digest, where the artifact really is) are made at launch with `insideRoots`.
 */
export function policyRefusal(policy: AgentPolicy, assignment: Assignment): string | null {
  const runtime = assignment.runtime;
  if (runtime.kind === 'simulated') {
    if (!policy.simulated) return 'the built-in simulated runtime is not allowed';
  } else {
    const refusal = templateRefusal(policy, runtime);
    if (refusal !== null) return refusal;
  }
  const artifact = assignment.artifact;
  if (artifact) {
    if (!artifact.uri.startsWith('file:')) return `artifact ${artifact.uri}: only file: URIs are supported`;
    if (policy.artifactRoots.length === 0) return 'no artifact root is allowed';
  }
  const version = assignment.version;
  if (version) {
    const problem = versionProblem(version);
    if (problem !== null) return problem;
    // The desired state is signed, so its URLs are the control plane's to choose; but only over HTTP: a file: URL
    // would have the agent (root) copy any local file into a runtime's folder.
    const other = version.files.find((file) => !FETCHED_SCHEMES.has(scheme(file.url)));
    if (other) return `version ${version.versionId}: file ${other.path} has a ${scheme(other.url) || 'malformed'} URL; only http: and https: URLs are fetched`;
  }
  return null;
}

const FETCHED_SCHEMES = new Set(['http:', 'https:']);

/** The URL's scheme (`https:`), or '' when it is no URL; never the rest, which may carry a signature. */
function scheme(url: string): string {
  return URL.canParse(url) ? new URL(url).protocol : '';
}

/** Whether `path` (already resolved, symbolic links included) lies in one of `roots` (resolved too). Pure. */
export function insideRoots(roots: readonly string[], path: string): boolean {
  return roots.some((root) => path === root || path.startsWith(root === '/' ? root : `${root}/`));
}
