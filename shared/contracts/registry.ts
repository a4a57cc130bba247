import { z } from 'zod';
import { duplicatePaths, MANIFEST_PATH_MAX_CHARS, manifestPathProblem } from '../manifest.js';

/** Text people type (a reason, notes, a source): no control characters but newlines and tabs. */
const Text = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .regex(/^[^\u0000-\u0008\u000b-\u001f\u007f]*$/, 'control characters are not allowed');

/** A model's or an alias's name: DNS-label-like, as a machine's (`llama-3-8b`, `chat-default`). */
export const ModelName = z.string().regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'lowercase letters, digits and dashes, 1-63 characters');
export type ModelName = z.infer<typeof ModelName>;
export const AliasName = ModelName;
export type AliasName = z.infer<typeof AliasName>;

/** A version's label within its model (`2024-06-01`, `v1.2.0`, `rev-3f2a9c1`): also a folder of the artifact store. */
export const VersionLabel = z
  .string()
  .regex(
    /^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$/,
    'letters, digits, dots, dashes and underscores, 1-64 characters, starting and ending with a letter or digit',
  );
export type VersionLabel = z.infer<typeof VersionLabel>;

/**
 * Where a version is in its lifecycle (docs/design.md section 7; the moves are functions/core/registry/lifecycle.ts).
 * `canary` onwards belong to the canary and gate slice, which is not built yet.
 */
export const VersionState = z.enum([
  'candidate',
  'documented',
  'verified',
  'evaluated',
  'approved',
  'canary',
  'gated',
  'promoted',
  'stable',
  'rolled_back',
  'rejected',
]);
export type VersionState = z.infer<typeof VersionState>;

export const ModelFormat = z.enum(['safetensors', 'gguf', 'other']);
export type ModelFormat = z.infer<typeof ModelFormat>;

/** Past a file of 16 TiB, a size is a typo; the total of a version stays an exact integer. */
const FILE_SIZE_MAX = 2 ** 44;
export const MANIFEST_FILES_MAX = 10_000;

export const ManifestFile = z.object({
  path: z
    .string()
    .max(MANIFEST_PATH_MAX_CHARS)
    .superRefine((path, ctx) => {
      const problem = manifestPathProblem(path);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    }),
  size: z.number().int().min(0).max(FILE_SIZE_MAX),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'a SHA-256 digest: 64 lowercase hexadecimal characters'),
});
export type ManifestFile = z.infer<typeof ManifestFile>;

/** Every file of a version (a Hugging Face-style folder is one version), each with its size and digest. */
export const Manifest = z.object({
  files: z
    .array(ManifestFile)
    .min(1)
    .max(MANIFEST_FILES_MAX)
    .superRefine((files, ctx) => {
      const repeated = duplicatePaths(files.map((f) => f.path));
      if (repeated.length > 0) ctx.addIssue({ code: 'custom', message: `paths must not repeat: ${repeated.slice(0, 3).join(', ')}` });
      if (files.reduce((sum, f) => sum + f.size, 0) > Number.MAX_SAFE_INTEGER)
        ctx.addIssue({ code: 'custom', message: 'the files add up to more bytes than a version may hold' });
    }),
});
export type Manifest = z.infer<typeof Manifest>;

/** Where a version's weights came from. */
export const Provenance = z.object({
  /** `huggingface:meta-llama/Meta-Llama-3-8B`, a URL, an internal training run. */
  source: Text(500),
  /** The source's commit, tag or run id. */
  revision: Text(200).optional(),
  notes: Text(2_000).optional(),
});
export type Provenance = z.infer<typeof Provenance>;

/** An SPDX identifier or expression (`apache-2.0`, `MIT OR Apache-2.0`, `LicenseRef-llama3`). */
export const Licence = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9.+:() -]{0,127}$/, 'an SPDX licence identifier or expression');
export type Licence = z.infer<typeof Licence>;

/** A reason a person gives for a decision: every approval, rejection and alias move carries one. */
const Reason = Text(1_000);

export const CreateModelRequest = z.object({ name: ModelName, description: Text(2_000).optional() });
export type CreateModelRequest = z.infer<typeof CreateModelRequest>;

export const RegisterVersionRequest = z.object({
  version: VersionLabel,
  format: ModelFormat,
  manifest: Manifest,
});
export type RegisterVersionRequest = z.infer<typeof RegisterVersionRequest>;

export const RecordProvenanceRequest = z.object({ licence: Licence, provenance: Provenance });
export type RecordProvenanceRequest = z.infer<typeof RecordProvenanceRequest>;

export const RecordEvaluationRequest = z.object({
  suite: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$/, 'a suite name: letters, digits and . _ : / -, 1-100 characters'),
  passed: z.boolean(),
  /** The run's numbers (`mmlu: 0.66`, `p95_ms: 840`). */
  metrics: z
    .record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'metric names are 1-64 of [A-Za-z0-9._-]'), z.number().min(-1e15).max(1e15))
    .refine((metrics) => Object.keys(metrics).length <= 64, 'at most 64 metrics')
    .default({}),
  notes: Text(2_000).optional(),
});
export type RecordEvaluationRequest = z.infer<typeof RecordEvaluationRequest>;

export const ApprovalRequest = z.object({ decision: z.enum(['approve', 'reject']), reason: Reason });
export type ApprovalRequest = z.infer<typeof ApprovalRequest>;

/** Points an alias at a version of a model: it must be approved (or further on). */
export const SetAliasRequest = z.object({ model: ModelName, version: VersionLabel, reason: Reason });
export type SetAliasRequest = z.infer<typeof SetAliasRequest>;

export const AliasRollbackRequest = z.object({ reason: Reason });
export type AliasRollbackRequest = z.infer<typeof AliasRollbackRequest>;

/** One file the verification found wrong; the files that matched are not listed. */
export const FileProblem = z.object({
  path: z.string(),
  problem: z.enum(['missing', 'size_mismatch', 'digest_mismatch', 'outside_folder', 'not_a_file', 'unreadable']),
  expectedSize: z.number().int(),
  /** Bytes found; null when there was no file to read. */
  actualSize: z.number().int().nullable(),
  actualSha256: z.string().nullable(),
});
export type FileProblem = z.infer<typeof FileProblem>;

/** Evidence of a digest verification: what was read, when, by whom, and what did not match. */
export const Verification = z.object({
  passed: z.boolean(),
  files: z.number().int(),
  bytes: z.number().int(),
  /** At most 100 problems are kept; `problemCount` counts them all. */
  problems: z.array(FileProblem),
  problemCount: z.number().int(),
  by: z.string(),
  at: z.string(),
});
export type Verification = z.infer<typeof Verification>;

export const EvaluationView = z.object({
  id: z.string(),
  suite: z.string(),
  passed: z.boolean(),
  metrics: z.record(z.string(), z.number()),
  notes: z.string().nullable(),
  recordedBy: z.string(),
  at: z.string(),
});
export type EvaluationView = z.infer<typeof EvaluationView>;

/** A version in a model's list: its state and size, not its files. */
export const VersionSummary = z.object({
  id: z.string(),
  version: z.string(),
  format: ModelFormat,
  state: VersionState,
  fileCount: z.number().int(),
  totalBytes: z.number().int(),
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type VersionSummary = z.infer<typeof VersionSummary>;

export const VersionView = VersionSummary.extend({
  model: z.string(),
  licence: z.string().nullable(),
  provenance: Provenance.nullable(),
  manifest: Manifest,
  verification: Verification.nullable(),
  evaluations: z.array(EvaluationView),
  createdBy: z.string(),
});
export type VersionView = z.infer<typeof VersionView>;

export const ModelView = z.object({ id: z.string(), name: z.string(), description: z.string().nullable(), createdAt: z.string() });
export type ModelView = z.infer<typeof ModelView>;

/** A model with its versions, newest first (at most the 100 newest). */
export const ModelDetail = ModelView.extend({ versions: z.array(VersionSummary) });
export type ModelDetail = z.infer<typeof ModelDetail>;

export const AliasView = z.object({
  name: z.string(),
  model: z.string(),
  version: z.string(),
  versionId: z.string(),
  updatedBy: z.string(),
  updatedAt: z.string(),
});
export type AliasView = z.infer<typeof AliasView>;

/** A person's promotion of a gated version: the alias moves to it, with the reason. */
export const PromoteRequest = z.object({ alias: AliasName, reason: Reason });
export type PromoteRequest = z.infer<typeof PromoteRequest>;

/** A release (promoted -> stable) or a rollback: a person's decision, with a reason. */
export const DecisionRequest = z.object({ reason: Reason });
export type DecisionRequest = z.infer<typeof DecisionRequest>;

export const PromotionResult = z.object({ version: VersionView, endedCanaries: z.array(z.string()) });
export type PromotionResult = z.infer<typeof PromotionResult>;

export const RollbackResult = z.object({ version: VersionView, aliases: z.array(z.string()), endedCanaries: z.array(z.string()) });
export type RollbackResult = z.infer<typeof RollbackResult>;
