import { z } from 'zod';
import { Labels, MachineName } from './common.js';
import { Inventory } from './inventory.js';

export const CreateEnrollmentTokenRequest = z.object({
  /** When set, only an agent enrolling under this name may use the token. */
  name: MachineName.optional(),
  labels: Labels.default({}),
  /** Seconds until the token expires; 15 minutes by default, at most 7 days. */
  ttlSeconds: z
    .number()
    .int()
    .min(10)
    .max(7 * 24 * 3600)
    .default(900),
});
export type CreateEnrollmentTokenRequest = z.infer<typeof CreateEnrollmentTokenRequest>;

export const EnrollmentTokenCreated = z.object({
  id: z.string(),
  /** Shown once; only its hash is stored. */
  token: z.string(),
  name: z.string().nullable(),
  labels: Labels,
  expiresAt: z.string(),
});
export type EnrollmentTokenCreated = z.infer<typeof EnrollmentTokenCreated>;

/** Revoked wins over used, used over expired; each by the database's clock. */
export const EnrollmentTokenState = z.enum(['active', 'used', 'expired', 'revoked']);
export type EnrollmentTokenState = z.infer<typeof EnrollmentTokenState>;

/** An enrollment token as the API lists it: never its secret, never its hash. */
export const EnrollmentTokenView = z.object({
  id: z.string(),
  /** The only machine name it enrolls, or null for any. */
  name: z.string().nullable(),
  /** The labels the machine it enrolls gets. */
  labels: Labels,
  /** The token that created it, or `system`. */
  createdBy: z.string(),
  createdAt: z.string(),
  expiresAt: z.string(),
  usedAt: z.string().nullable(),
  /** The machine it enrolled. */
  machineId: z.string().nullable(),
  revokedAt: z.string().nullable(),
  state: EnrollmentTokenState,
});
export type EnrollmentTokenView = z.infer<typeof EnrollmentTokenView>;

export const Ed25519PublicJwk = z.object({ kty: z.literal('OKP'), crv: z.literal('Ed25519'), x: z.string().regex(/^[A-Za-z0-9_-]{43}$/) }).strip();
export type Ed25519PublicJwk = z.infer<typeof Ed25519PublicJwk>;

export const EnrollRequest = z.object({
  token: z.string().min(10).max(200),
  name: MachineName,
  /** Refused unless a canonical point of the prime-order subgroup (functions/services/ed25519-key.ts). */
  publicKey: Ed25519PublicJwk,
  inventory: Inventory,
  /**
   * A machine's labels come from its enrollment token (or an operator), never from the machine: placement follows
   * labels, so a machine declaring its own could draw any workload. Kept as a field that must be empty, so that
   * an agent that sends labels is told so (400) rather than silently ignored.
   */
  labels: Labels.default({}).refine(
    (labels) => Object.keys(labels).length === 0,
    'labels come from the enrollment token or an operator; a machine cannot declare its own',
  ),
});
export type EnrollRequest = z.infer<typeof EnrollRequest>;

export const Jwks = z.object({
  keys: z.array(z.object({ kty: z.string(), crv: z.string(), x: z.string(), kid: z.string(), alg: z.string().optional(), use: z.string().optional() })),
});
export type Jwks = z.infer<typeof Jwks>;

export const EnrollResponse = z.object({
  machineId: z.string(),
  workspaceId: z.string(),
  clusterId: z.string(),
  credentialId: z.string(),
  credentialExpiresAt: z.string(),
  jwks: Jwks,
  heartbeatIntervalMs: z.number().int().positive(),
});
export type EnrollResponse = z.infer<typeof EnrollResponse>;

/** POST /agent/v1/credentials: rotate to a new machine key; the old one stays valid until its own expiry. */
export const RotateCredentialRequest = z.object({ publicKey: Ed25519PublicJwk });
export type RotateCredentialRequest = z.infer<typeof RotateCredentialRequest>;

export const RotateCredentialResponse = z.object({ credentialId: z.string(), credentialExpiresAt: z.string() });
export type RotateCredentialResponse = z.infer<typeof RotateCredentialResponse>;
