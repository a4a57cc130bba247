import { z } from 'zod';
import { ManifestFile } from './registry.js';

/**
 * A model version's files as a signed assignment carries them: the manifest, and for each file a short-lived
 * URL to fetch it from (an S3 presigned GET, or the control plane's own signed URL for the local store). The URLs
 * are filled in when the desired state is signed, never stored; the stored spec has them empty.
 */
const ArtifactFile = ManifestFile.extend({ url: z.string().max(8192) });

export const VersionArtifact = z.object({
  /** The model version's id (`mv_...`): the agent's cache and heartbeats name versions by it. */
  versionId: z.string().min(1).max(64),
  model: z.string().max(64),
  version: z.string().max(64),
  totalBytes: z.number().int().nonnegative(),
  files: z.array(ArtifactFile).min(1).max(10_000),
  /** When the URLs stop working (epoch seconds): a download that outlives them resumes with the next desired state's. */
  urlsExpireAt: z.number().int().nonnegative(),
});
export type VersionArtifact = z.infer<typeof VersionArtifact>;
