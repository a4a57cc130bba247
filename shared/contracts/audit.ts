import { z } from 'zod';
import { pageOf } from './page.js';

/** How an audited action ended. */
export const AuditOutcome = z.enum(['succeeded', 'denied', 'failed']);
export type AuditOutcome = z.infer<typeof AuditOutcome>;

/**
 * One entry of a workspace's audit log (docs/security.md, "Audit log"): exactly the fields its hash covers
 * (`shared/audit-chain.ts`), and the hash. `at` is ISO-8601 UTC with milliseconds, as hashed. Never holds secrets
 * or payloads.
 */
export const AuditEntry = z.object({
  id: z.string(),
  workspaceId: z.string(),
  /** 1, 2, 3... within the workspace: the chain's order. */
  seq: z.number().int().positive(),
  at: z.string(),
  /** `tok_...` (an API token), `mch_...` (a machine) or `system`. */
  actor: z.string(),
  action: z.string(),
  target: z.string(),
  outcome: z.string(),
  details: z.record(z.string(), z.unknown()),
  /** The previous entry's hash; '' for the first entry of the chain. */
  prevHash: z.string(),
  /** SHA-256 (hex) of the other fields; 'legacy' for entries written before the chain existed. */
  hash: z.string(),
});
export type AuditEntry = z.infer<typeof AuditEntry>;
/** The fields of an audit entry its hash covers: everything but the hash itself. */
export type AuditEntryFields = Omit<AuditEntry, 'hash'>;

export const AuditPage = pageOf(AuditEntry);
export type AuditPage = z.infer<typeof AuditPage>;

/**
 * The verdict on a workspace's chain: intact (`head` is its last entry's hash: keep it elsewhere, and a chain cut
 * short since is told by it), or broken at the first entry that does not hold, and why. `entries` counts the
 * entries read (up to the broken one), `legacy` those from before the chain existed.
 */
export const ChainVerdict = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), entries: z.number().int(), legacy: z.number().int(), head: z.string() }),
  z.object({
    ok: z.literal(false),
    entries: z.number().int(),
    legacy: z.number().int(),
    brokenAt: z.object({ seq: z.number().int(), id: z.string() }),
    reason: z.string(),
  }),
]);
export type ChainVerdict = z.infer<typeof ChainVerdict>;
