import { S3Client } from '@aws-sdk/client-s3';
import type { ArtifactsS3Config } from '../../kernel/config.js';

/** The client of the artifact store's bucket (docs/artifacts.md), for model versions and jobs' data alike. */
export function s3Client(config: ArtifactsS3Config): S3Client {
  return new S3Client({
    region: config.region,
    endpoint: config.endpoint,
    forcePathStyle: config.forcePathStyle,
    // Unset: the SDK's own chain (AWS_* variables, an instance or task role).
    credentials: config.accessKeyId && config.secretAccessKey ? { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey } : undefined,
    // Checksums only where S3 demands them: verification hashes every byte already, and presigned URLs stay
    // plain GETs that any S3-compatible server answers.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

/** A key of the store as the bucket names it: under the configured prefix, if any. */
export function bucketKey(config: ArtifactsS3Config, key: string): string {
  return (config.prefix ? `${config.prefix}/` : '') + key;
}

/** The HTTP status of an S3 error, when the bucket answered one. */
export const statusOf = (error: unknown) => (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
