import { z } from 'zod';
import { MachineName, Role } from './common.js';
import { DeploymentName } from './deployment.js';
import { MAX_RUN_PRIORITY } from './run.js';

/** Names people type (a token's purpose, a member's e-mail address): no control characters, which no store holds well. */
const Text = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .regex(/^[^\u0000-\u001f\u007f]*$/, 'control characters are not allowed');

/** Ten years: the longest a token may be made to last by `ttlSeconds`. */
const TOKEN_TTL_MAX_S = 10 * 366 * 24 * 3600;

export const TokenState = z.enum(['active', 'expired', 'revoked']);
export type TokenState = z.infer<typeof TokenState>;

export const CreateApiTokenRequest = z.object({
  name: Text(100),
  role: Role,
  /** The member it is issued to: its role may not exceed theirs, and removing them revokes it. */
  memberId: z.string().min(1).max(64).optional(),
  /** Seconds until it expires; or `expiresAt`; neither: it never expires. */
  ttlSeconds: z.number().int().min(1).max(TOKEN_TTL_MAX_S).optional(),
  expiresAt: z.iso.datetime({ offset: true }).optional(),
  /** Inference tokens only: the models (deployment names) it may call; absent: every model of the workspace. */
  models: z
    .array(DeploymentName)
    .min(1)
    .max(100)
    .refine((names) => new Set(names).size === names.length, 'models must not repeat')
    .optional(),
  /** Inference tokens only: requests per minute across every instance; absent: unlimited. */
  rateLimitPerMinute: z.number().int().min(1).max(1_000_000).optional(),
});
export type CreateApiTokenRequest = z.infer<typeof CreateApiTokenRequest>;

/** An API token as the API shows it: never its secret, never its hash. */
export const ApiTokenView = z.object({
  id: z.string(),
  name: z.string(),
  role: Role,
  member: z.object({ id: z.string(), name: z.string() }).nullable(),
  models: z.array(z.string()).nullable(),
  rateLimitPerMinute: z.number().int().nullable(),
  /** The token that created it, or `system`; null when that token is another workspace's (a workspace's first admin token). */
  createdBy: z.string().nullable(),
  createdAt: z.string(),
  expiresAt: z.string().nullable(),
  revokedAt: z.string().nullable(),
  /** Derived with the database's clock: revoked wins over expired. */
  state: TokenState,
});
export type ApiTokenView = z.infer<typeof ApiTokenView>;

export const ApiTokenCreated = ApiTokenView.extend({
  /** Shown once; only its SHA-256 is stored. */
  token: z.string(),
});
export type ApiTokenCreated = z.infer<typeof ApiTokenCreated>;

/** A workspace's name: DNS-label-like, as a machine's. */
const WorkspaceName = MachineName;

export const CreateWorkspaceRequest = z.object({ name: WorkspaceName });
export type CreateWorkspaceRequest = z.infer<typeof CreateWorkspaceRequest>;

/**
 * A workspace's standing in the fleet's run queue (docs/runs.md): its fair-share weight (twice the weight, twice the
 * GPU-seconds before its runs queue behind others') and the highest priority its runs may use. Set by an admin of
 * the default workspace, who runs the fleet.
 */
export const WorkspaceRunShare = z.object({
  weight: z.number().positive().max(1000),
  priorityCeiling: z.number().int().min(0).max(MAX_RUN_PRIORITY),
});
export type WorkspaceRunShare = z.infer<typeof WorkspaceRunShare>;

export const WorkspaceView = z.object({ id: z.string(), name: z.string(), createdAt: z.string(), runs: WorkspaceRunShare });
export type WorkspaceView = z.infer<typeof WorkspaceView>;

export const WorkspaceCreated = z.object({
  workspace: WorkspaceView,
  /** The new workspace's first admin token, issued to no member: shown once. */
  adminToken: ApiTokenCreated,
});
export type WorkspaceCreated = z.infer<typeof WorkspaceCreated>;

export const AddMemberRequest = z.object({
  /** How operators name them: an e-mail address or a team name; unique among a workspace's members. */
  name: Text(200),
  /** The highest role a token issued to them may carry. */
  role: Role,
});
export type AddMemberRequest = z.infer<typeof AddMemberRequest>;

export const MemberView = z.object({ id: z.string(), name: z.string(), role: Role, createdAt: z.string() });
export type MemberView = z.infer<typeof MemberView>;

export const MemberRemoved = z.object({
  id: z.string(),
  removed: z.literal(true),
  /** The member's tokens this removal revoked (those already revoked are not repeated). */
  revokedTokens: z.array(z.string()),
});
export type MemberRemoved = z.infer<typeof MemberRemoved>;
