import { Hono, type Context } from 'hono';
import { FileListQuery, FileName, UploadPurpose, type FileObject } from '../../../shared/contracts/openai-files.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { readAll } from '../../kernel/web-streams.js';
import {
  deleteFile,
  discardFileObject,
  fileStore,
  getFile,
  listFiles,
  openFileContent,
  recordFile,
  stageFileObject,
  type FilesCtx,
  type StagedFile,
} from '../../services/files.js';
import type { ServicePorts } from '../../services/service-context.js';
import { formBoundary, formParts, MultipartError } from '../http/multipart.js';
import { limitedBody } from '../http/node-io.js';
import { OpenAIError, parseOpenAI } from './errors.js';

/** Bytes of a plain field of an upload (`purpose`): a word. */
const FIELD_MAX_BYTES = 1024;
/** Room in an upload's body beside the file's bytes: the parts' headers, the fields, the boundaries. */
const FORM_OVERHEAD_BYTES = 64 * 1024;

const invalid = (message: string, param: string | null, code = 'invalid_value') => new OpenAIError(400, 'invalid_request_error', code, message, param);

/** The context of a Files call; refused at once (409 `no_artifact_store`) where there is no store to keep files in. */
function filesCtx(c: Context<AppEnv>): FilesCtx & ServicePorts {
  const ports = c.get('ports');
  const ctx = { ...serviceCtx(ports, c.get('actor').tokenId), objects: ports.objects };
  fileStore(ctx);
  return ctx;
}

async function fieldText(body: ReadableStream<Uint8Array>, name: string): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  let size = 0;
  for await (const chunk of readAll(body)) {
    size += chunk.length;
    if (size > FIELD_MAX_BYTES) throw invalid(`'${name}' is longer than ${FIELD_MAX_BYTES} bytes`, name);
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}

function uploadPurpose(value: string): UploadPurpose {
  if (value === 'batch_output') throw invalid("files of purpose 'batch_output' are written by batches only", 'purpose');
  const parsed = UploadPurpose.safeParse(value);
  if (!parsed.success) throw invalid(`'purpose' must be one of ${UploadPurpose.options.join(', ')}`, 'purpose');
  return parsed.data;
}

/** OpenAI's bounds of `expires_after[seconds]`: an hour to 30 days. */
function expirySeconds(text: string): number {
  const seconds = /^[0-9]{1,9}$/.test(text) ? Number(text) : Number.NaN;
  if (!(seconds >= 3_600 && seconds <= 2_592_000))
    throw invalid('expires_after[seconds] must be a whole number from 3600 to 2592000', 'expires_after[seconds]');
  return seconds;
}

/**
 * Reads an upload's form as it arrives and stores its file on the way (the purpose may come before or after it,
 * as clients order fields as they like); whatever refuses the upload once the bytes are stored discards them.
 */
async function upload(c: Context<AppEnv>, ctx: FilesCtx & ServicePorts): Promise<FileObject> {
  const boundary = formBoundary(c.req.header('content-type'));
  if (!boundary) throw invalid('the body must be multipart/form-data, with a boundary', null, 'invalid_content_type');
  const maxBytes = ctx.config.filesMaxBytes;
  const tooLarge = () =>
    new OpenAIError(413, 'invalid_request_error', 'request_too_large', `the file exceeds ${maxBytes} bytes`, 'file', { Connection: 'close' });
  const chunks = limitedBody(c, maxBytes + FORM_OVERHEAD_BYTES, tooLarge);
  if (!chunks) throw invalid('the body is empty', null, 'invalid_multipart');
  let staged: StagedFile | null = null;
  try {
    let filename = '';
    let purpose: UploadPurpose | null = null;
    let anchored = false;
    let expiresInS: number | null = null;
    for await (const part of formParts(chunks, boundary)) {
      if (part.name === 'file') {
        if (staged) throw invalid("the form holds more than one 'file'", 'file');
        if (part.filename === null) throw invalid("'file' must be a file, sent with its file name", 'file');
        const name = FileName.safeParse(part.filename);
        if (!name.success) throw invalid(name.error.issues[0]!.message, 'file');
        filename = name.data;
        staged = await stageFileObject({ ctx, input: { workspaceId: c.get('actor').workspaceId, body: part.body } });
      } else if (part.name === 'purpose') {
        if (purpose !== null) throw invalid("the form holds more than one 'purpose'", 'purpose');
        purpose = uploadPurpose(await fieldText(part.body, 'purpose'));
      } else if (part.name === 'expires_after[anchor]') {
        if ((await fieldText(part.body, 'expires_after[anchor]')) !== 'created_at') {
          throw invalid("expires_after[anchor] must be 'created_at'", 'expires_after[anchor]');
        }
        anchored = true;
      } else if (part.name === 'expires_after[seconds]') {
        expiresInS = expirySeconds(await fieldText(part.body, 'expires_after[seconds]'));
      }
      // Any other field is skipped: clients add fields of their own.
    }
    if (purpose === null) throw invalid("'purpose' is a required field", 'purpose', 'missing_required_parameter');
    if (!staged) throw invalid("'file' is a required field", 'file', 'missing_required_parameter');
    if (anchored !== (expiresInS !== null)) throw invalid('expires_after takes both its anchor and its seconds', 'expires_after');
    const recorded = staged;
    // From here recordFile owns the bytes: it discards them itself if it refuses them.
    staged = null;
    return await recordFile({ ctx, input: { staged: recorded, filename, purpose, expiresInS } });
  } catch (error) {
    if (staged) await discardFileObject({ ctx, input: staged });
    if (error instanceof MultipartError) throw invalid(`the multipart body is malformed: ${error.message}`, null, 'invalid_multipart');
    if (error instanceof ApiError && error.code === 'payload_too_large') throw tooLarge();
    throw error;
  }
}

/**
 * OpenAI's Files API (docs/files.md): a workspace's files, their bytes in the artifact store under `_data/`, never
 * in the database. Mounted under `/v1`, behind its token check: every role may use it, within its own workspace.
 */
export function filesApi(): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.post('/', async (c) => c.json(await upload(c, filesCtx(c))));

  app.get('/', async (c) => {
    const ctx = filesCtx(c);
    const query = parseOpenAI(FileListQuery, c.req.query());
    return c.json(await listFiles({ ctx, input: { workspaceId: c.get('actor').workspaceId, ...query } }));
  });

  app.get('/:file_id', async (c) =>
    c.json(await getFile({ ctx: filesCtx(c), input: { workspaceId: c.get('actor').workspaceId, fileId: c.req.param('file_id') } })),
  );

  app.get('/:file_id/content', async (c) => {
    const { file, content } = await openFileContent({ ctx: filesCtx(c), input: { workspaceId: c.get('actor').workspaceId, fileId: c.req.param('file_id') } });
    const headers = {
      // Bytes to save, never a page to render under the API's origin, whatever the file holds.
      'Content-Type': 'application/octet-stream',
      'Content-Disposition': `attachment; filename*=UTF-8''${encodeURIComponent(file.filename)}`,
      'Content-Length': String(content.size),
      'Cache-Control': 'private, no-store',
    };
    // Hono answers HEAD with this route and drops the body: the file is closed here rather than left open.
    if (c.req.method === 'HEAD') {
      await content.close();
      return c.body(null, 200, headers);
    }
    return c.body(content.stream(0, content.size - 1), 200, headers);
  });

  app.delete('/:file_id', async (c) =>
    c.json(await deleteFile({ ctx: filesCtx(c), input: { workspaceId: c.get('actor').workspaceId, fileId: c.req.param('file_id') } })),
  );

  return app;
}
