import { createHash } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  UploadPartCommand,
  type CompletedPart,
} from '@aws-sdk/client-s3';
import type { ArtifactsS3Config } from '../../kernel/config.js';
import type { OpenedFile } from '../../kernel/ports/artifact-store.js';
import { checkedDataKey, ObjectTooLargeError, type ObjectStore, type StoredObject } from '../../kernel/ports/object-store.js';
import { readAll } from '../../kernel/web-streams.js';
import { concat } from '../../../shared/frame-codec.js';
import { bucketKey, s3Client, statusOf } from './s3-client.js';

/**
 * Bytes of one part of a multipart upload: S3 wants 5 MiB or more of every part but the last, and at most 10,000
 * parts (80 GB at this size). An upload holds one part in memory at a time.
 */
const PART_BYTES = 8 * 1024 * 1024;

/**
 * Jobs' data in the artifact store's bucket (docs/artifacts.md, "Job data"): `[<prefix>/]_data/...`. A body of
 * one part goes up as one PutObject; a longer one as a multipart upload, a part at a time as it arrives, so the
 * object appears whole when the upload completes, and an upload given up (too large, the body broken, the bucket
 * away) is aborted. The credentials need s3:PutObject, s3:DeleteObject and s3:AbortMultipartUpload on `_data/`.
 */
export function s3ObjectStore(config: ArtifactsS3Config): ObjectStore {
  const client = s3Client(config);
  const Bucket = config.bucket;
  const keyOf = (key: string) => bucketKey(config, checkedDataKey(key));

  return {
    async putObject(key: string, body: ReadableStream<Uint8Array>, { maxBytes }: { maxBytes: number }): Promise<StoredObject> {
      const Key = keyOf(key);
      const hash = createHash('sha256');
      let size = 0;
      let uploadId: string | undefined;
      const parts: CompletedPart[] = [];
      let pending: Uint8Array[] = [];
      let pendingBytes = 0;
      const sendPart = async () => {
        uploadId ??= (await client.send(new CreateMultipartUploadCommand({ Bucket, Key }))).UploadId;
        const PartNumber = parts.length + 1;
        const { ETag } = await client.send(new UploadPartCommand({ Bucket, Key, UploadId: uploadId, PartNumber, Body: concat(pending, pendingBytes) }));
        parts.push({ ETag, PartNumber });
        pending = [];
        pendingBytes = 0;
      };
      try {
        for await (const chunk of readAll(body)) {
          size += chunk.length;
          if (size > maxBytes) throw new ObjectTooLargeError(maxBytes);
          hash.update(chunk);
          pending.push(chunk);
          pendingBytes += chunk.length;
          if (pendingBytes >= PART_BYTES) await sendPart();
        }
        if (uploadId === undefined) {
          await client.send(new PutObjectCommand({ Bucket, Key, Body: concat(pending, pendingBytes) }));
        } else {
          if (pendingBytes > 0) await sendPart();
          await client.send(new CompleteMultipartUploadCommand({ Bucket, Key, UploadId: uploadId, MultipartUpload: { Parts: parts } }));
        }
      } catch (error) {
        // An abort that fails too leaves parts only the bucket's rule for incomplete uploads removes: the error that
        // stopped the upload is the one to report.
        if (uploadId !== undefined) await client.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId: uploadId })).catch(() => {});
        throw error;
      }
      return { size, sha256: hash.digest('hex') };
    },

    async openObject(key: string): Promise<OpenedFile | null> {
      const Key = keyOf(key);
      let size: number;
      try {
        size = (await client.send(new HeadObjectCommand({ Bucket, Key }))).ContentLength ?? 0;
      } catch (error) {
        if (statusOf(error) === 404) return null;
        throw error;
      }
      return {
        size,
        // A ranged GET, so that what is sent is what was asked for.
        stream(start: number, end: number) {
          let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
          return new ReadableStream<Uint8Array>(
            {
              async pull(controller) {
                if (!reader) {
                  const { Body } = await client.send(new GetObjectCommand({ Bucket, Key, Range: `bytes=${start}-${end}` }));
                  if (!Body) throw new Error(`the bucket sent no body for ${key}`);
                  reader = Body.transformToWebStream().getReader();
                }
                const { done, value } = await reader.read();
                if (done) controller.close();
                else controller.enqueue(value);
              },
              cancel: (reason) => reader?.cancel(reason),
            },
            // Nothing is fetched before the first read: a HEAD, or a client gone at once, costs no GET.
            { highWaterMark: 0 },
          );
        },
        // Nothing is held open until the stream is read.
        close: async () => {},
      };
    },

    async deleteObject(key: string): Promise<void> {
      await client.send(new DeleteObjectCommand({ Bucket, Key: keyOf(key) }));
    },
  };
}
