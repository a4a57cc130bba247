import { z } from 'zod';

/** Labels are small operator-chosen key/value tags used for placement. */
export const Labels = z
  .record(z.string().regex(/^[a-z0-9][a-z0-9._/-]{0,62}$/i, 'label keys are 1-63 of [A-Za-z0-9._/-]'), z.string().max(128))
  .refine((labels) => Object.keys(labels).length <= 32, 'at most 32 labels');
export type Labels = z.infer<typeof Labels>;

/** A machine name as an operator types it: DNS-label-like. */
export const MachineName = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'lowercase letters, digits and dashes, 1-63 characters');
export type MachineName = z.infer<typeof MachineName>;

/** The management and agent surfaces' error envelope (docs/design.md section 2). */
export const ErrorEnvelope = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    requestId: z.string(),
    details: z.unknown().optional(),
  }),
});
export type ErrorEnvelope = z.infer<typeof ErrorEnvelope>;

export const Role = z.enum(['viewer', 'operator', 'admin', 'inference']);
export type Role = z.infer<typeof Role>;
