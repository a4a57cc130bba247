import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { ManifestFile } from '../../../shared/contracts/registry.js';
import type { ArtifactsS3Config } from '../../kernel/config.js';
import { ApiError } from '../../kernel/errors.js';
import {
  compareFile,
  digestOf,
  fileKey,
  unreadFile,
  verifyEach,
  type ArtifactStore,
  type FileCheck,
  type VersionFolder,
} from '../../kernel/ports/artifact-store.js';
import { bucketKey, s3Client, statusOf } from './s3-client.js';

/** The longest a SigV4 presigned URL may live (S3 refuses more): 7 days. */
const PRESIGN_MAX_S = 7 * 24 * 3600;

/**
 * What an S3 error says of one file: absent (404), or not ours to read (403: the credentials lack s3:GetObject
 * there). Anything else (the endpoint away, a 5xx) says nothing of the file: the verification cannot finish.
 */
function problemOf(error: unknown): 'missing' | 'unreadable' {
  const status = statusOf(error);
  if (status === 404) return 'missing';
  if (status === 403) return 'unreadable';
  const reason = error instanceof Error ? error.message : String(error);
  throw new ApiError('unavailable', `the S3 artifact store did not answer (${status ?? reason}); retry later`);
}

/**
 * The S3-compatible artifact store (docs/artifacts.md): a version's files are the objects
 * `[<prefix>/]<workspace id>/<model name>/<version>/<path>` of one bucket, and agents fetch them with SigV4
 * presigned GET URLs. The control plane never writes a version (operators upload them with their own tools); jobs' data
 * under `_data/` is `s3-objects.ts`'s.
 */
export function s3ArtifactStore(config: ArtifactsS3Config): ArtifactStore {
  const client = s3Client(config);
  const keyOf = (folder: VersionFolder, path: string) => bucketKey(config, fileKey(folder, path));

  async function check(folder: VersionFolder, file: ManifestFile): Promise<FileCheck> {
    const Key = keyOf(folder, file.path);
    let found: number | undefined;
    try {
      found = (await client.send(new HeadObjectCommand({ Bucket: config.bucket, Key }))).ContentLength;
    } catch (error) {
      return { problem: unreadFile(file, problemOf(error)), bytes: 0 };
    }
    // A size that differs needs no hashing: the object cannot match.
    if (found !== file.size) return { problem: unreadFile(file, 'size_mismatch', found ?? null), bytes: 0 };
    let body: AsyncIterable<Uint8Array>;
    try {
      // An object replaced since the HEAD is read whole all the same: its size and digest are what is compared.
      body = (await client.send(new GetObjectCommand({ Bucket: config.bucket, Key }))).Body as AsyncIterable<Uint8Array>;
    } catch (error) {
      return { problem: unreadFile(file, problemOf(error)), bytes: 0 };
    }
    let actual: { size: number; sha256: string };
    try {
      actual = await digestOf(body);
    } catch (error) {
      // The connection broke mid-object: nothing is known of the file.
      throw new ApiError(
        'unavailable',
        `the S3 artifact store stopped sending ${file.path} (${error instanceof Error ? error.message : String(error)}); retry later`,
      );
    }
    return { problem: compareFile(file, actual), bytes: actual.size };
  }

  return {
    verify: (folder: VersionFolder, files: readonly ManifestFile[]) => verifyEach(files, (file) => check(folder, file)),

    async fileUrl(folder: VersionFolder, path: string, expiresAt: number): Promise<string> {
      // Signed so that it expires at `expiresAt` exactly, even one already past (SigV4 wants a lifetime of 1 s or more).
      const signedAt = Math.min(Math.floor(Date.now() / 1000), expiresAt - 1);
      const expiresIn = Math.min(PRESIGN_MAX_S, expiresAt - signedAt);
      return await getSignedUrl(client, new GetObjectCommand({ Bucket: config.bucket, Key: keyOf(folder, path) }), {
        expiresIn,
        signingDate: new Date(signedAt * 1000),
      });
    },
  };
}
