import { z } from 'zod';
import { cursorPage } from './openai-page.js';

/**
 * What a file is for (docs/files.md). `batch` (a batch's input) and `user_data` are uploaded by clients;
 * `batch_output` is written by the control plane alone (a batch's output and error files). OpenAI's other purposes
 * (assistants, fine-tune, vision, evals) name features this control plane does not have, so they are refused.
 */
export const FilePurpose = z.enum(['batch', 'batch_output', 'user_data']);
export type FilePurpose = z.infer<typeof FilePurpose>;

/** The purposes a client may upload with: every one but those the system writes. */
export const UploadPurpose = FilePurpose.exclude(['batch_output']);
export type UploadPurpose = z.infer<typeof UploadPurpose>;

/** Longest file name, in UTF-8 bytes (a file system's usual bound). */
const FILE_NAME_MAX_BYTES = 255;

/** A file's name as the client gave it: metadata only, never a path on any disk. */
export const FileName = z
  .string()
  .min(1, 'the file name is empty')
  .refine((name) => new TextEncoder().encode(name).length <= FILE_NAME_MAX_BYTES, `the file name is longer than ${FILE_NAME_MAX_BYTES} bytes`)
  .refine((name) => !/[\u0000-\u001f\u007f]/.test(name), 'the file name holds a control character');
export type FileName = z.infer<typeof FileName>;

/** OpenAI's `File` object. `status` is always `processed`: a file is listed only once all its bytes are stored. */
export const FileObject = z.object({
  id: z.string(),
  object: z.literal('file'),
  bytes: z.number().int().positive(),
  /** Epoch seconds. */
  created_at: z.number().int(),
  filename: z.string(),
  purpose: FilePurpose,
  status: z.literal('processed'),
  /** Epoch seconds; null: kept until deleted. */
  expires_at: z.number().int().nullable(),
});
export type FileObject = z.infer<typeof FileObject>;

/** A page of `GET /v1/files`: OpenAI's cursor page, which the SDKs follow by the last item's id (`after`). */
export const FileList = cursorPage(FileObject);
export type FileList = z.infer<typeof FileList>;

/** The answer to `DELETE /v1/files/{file_id}`. */
export const FileDeleted = z.object({ id: z.string(), object: z.literal('file'), deleted: z.literal(true) });
export type FileDeleted = z.infer<typeof FileDeleted>;

/** `GET /v1/files`'s query, OpenAI's: newest first by default, up to 10,000 a page. */
export const FileListQuery = z.object({
  purpose: FilePurpose.optional(),
  limit: z.coerce.number().int().min(1).max(10_000).default(10_000),
  /** The id of the last file of the previous page. */
  after: z.string().max(64).optional(),
  order: z.enum(['asc', 'desc']).default('desc'),
});
export type FileListQuery = z.infer<typeof FileListQuery>;
