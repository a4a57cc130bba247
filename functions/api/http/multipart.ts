import { concat } from '../../../shared/frame-codec.js';

/**
 * A streaming `multipart/form-data` reader (RFC 7578) over any runtime's body chunks: each part's bytes are handed
 * on as they arrive, so a file of hundreds of megabytes crosses the control plane a chunk at a time. Hono's
 * `parseBody()` and the web `Request.formData()` hold the whole body; busboy is Node streams only and not a
 * dependency of the control plane. What this reads is exactly what browsers, undici's `FormData` and curl send.
 */

/** A body that is not multipart/form-data as RFC 7578 writes it: a 400, whatever the part. */
export class MultipartError extends Error {}

/** One part of the body: its field name, its file name (null for a plain field) and its bytes. */
export interface FormPart {
  name: string;
  filename: string | null;
  /** The part's bytes as they arrive; a part left unread is skipped when the next one is asked for. */
  body: ReadableStream<Uint8Array>;
}

/** Bytes of one part's headers, and parts in one body: what of a body is not a part's bytes stays small. */
const HEADER_MAX_BYTES = 8 * 1024;
const MAX_PARTS = 16;
const CR = 13;
const LF = 10;
const DASH = 45;
const SPACE = 32;
const TAB = 9;
const encoder = new TextEncoder();
const HEADER_END = encoder.encode('\r\n\r\n');
/** RFC 2046's boundary: 1-70 characters of this set, not ending with a space. */
const BOUNDARY = /^[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]$/;

/** The boundary of a `multipart/form-data` content type, or null when the type is another or names none. */
export function formBoundary(contentType: string | undefined): string | null {
  if (!contentType) return null;
  const [type = '', ...parameters] = contentType.split(';');
  if (type.trim().toLowerCase() !== 'multipart/form-data') return null;
  for (const parameter of parameters) {
    const equals = parameter.indexOf('=');
    if (equals < 0 || parameter.slice(0, equals).trim().toLowerCase() !== 'boundary') continue;
    const raw = parameter.slice(equals + 1).trim();
    const value = raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"') ? raw.slice(1, -1) : raw;
    return BOUNDARY.test(value) ? value : null;
  }
  return null;
}

/** Where `needle` starts in `haystack` from `from`, or -1. */
function indexOf(haystack: Uint8Array, needle: Uint8Array, from = 0): number {
  const first = needle[0]!;
  for (let at = haystack.indexOf(first, from); at >= 0 && at + needle.length <= haystack.length; at = haystack.indexOf(first, at + 1)) {
    let i = 1;
    while (i < needle.length && haystack[at + i] === needle[i]) i += 1;
    if (i === needle.length) return at;
  }
  return -1;
}

/**
 * A `Content-Disposition: form-data` header's field name and file name (`filename*`, RFC 5987's UTF-8 form, before
 * `filename`). Quoted values take backslash escapes; percent signs are left as they are, since browsers write a
 * quote in a name as `%22` and a `%` as itself.
 */
function disposition(value: string): { name: string; filename: string | null } {
  let rest = value.trimStart();
  if (!/^form-data(?=[\s;]|$)/i.test(rest)) throw new MultipartError('a part is not form-data');
  rest = rest.slice('form-data'.length);
  const parameters = new Map<string, string>();
  while ((rest = rest.trimStart()).length > 0) {
    const match = /^;\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+)\s*=\s*/.exec(rest);
    if (!match) throw new MultipartError('a part has a malformed Content-Disposition');
    rest = rest.slice(match[0].length);
    let parameterValue: string;
    if (rest.startsWith('"')) {
      const quoted = /^"((?:[^"\\]|\\.)*)"/.exec(rest);
      if (!quoted) throw new MultipartError('a part has an unterminated quoted value');
      parameterValue = quoted[1]!.replace(/\\(.)/g, '$1');
      rest = rest.slice(quoted[0].length);
    } else {
      parameterValue = /^[^;\s]*/.exec(rest)![0];
      rest = rest.slice(parameterValue.length);
    }
    const key = match[1]!.toLowerCase();
    if (parameters.has(key)) throw new MultipartError('a part names a parameter of its Content-Disposition twice');
    parameters.set(key, parameterValue);
  }
  const name = parameters.get('name');
  if (name === undefined) throw new MultipartError('a part has no field name');
  const extended = parameters.get('filename*');
  if (extended !== undefined) {
    const utf8 = /^utf-8'[^']*'(.*)$/i.exec(extended);
    if (!utf8) throw new MultipartError("a part's filename* is not UTF-8''<percent-encoded name>");
    try {
      return { name, filename: decodeURIComponent(utf8[1]!) };
    } catch {
      throw new MultipartError("a part's filename* is not valid percent-encoding");
    }
  }
  return { name, filename: parameters.get('filename') ?? null };
}

function partHeaders(bytes: Uint8Array): { name: string; filename: string | null } {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new MultipartError("a part's headers are not UTF-8");
  }
  let found: { name: string; filename: string | null } | null = null;
  for (const line of text.split('\r\n')) {
    if (line === '') continue;
    const colon = line.indexOf(':');
    if (colon <= 0) throw new MultipartError('a part has a malformed header line');
    if (line.slice(0, colon).trim().toLowerCase() !== 'content-disposition') continue;
    if (found) throw new MultipartError('a part has two Content-Disposition headers');
    found = disposition(line.slice(colon + 1));
  }
  if (!found) throw new MultipartError('a part has no Content-Disposition');
  return found;
}

/**
 * The parts of a `multipart/form-data` body, one at a time, each handed on before its bytes are read: at most a
 * chunk and a delimiter are held. A body that breaks the format fails the iteration (or the part's stream) with
 * `MultipartError`; an error of `chunks` itself (a size limit, a client gone) goes through as it is.
 */
export async function* formParts(chunks: AsyncIterable<Uint8Array>, boundary: string): AsyncGenerator<FormPart> {
  const source = chunks[Symbol.asyncIterator]();
  const delimiter = encoder.encode(`\r\n--${boundary}`);
  // A CRLF in front of the body: the first delimiter, which may open it without one, is then found as every other.
  let buffer: Uint8Array = encoder.encode('\r\n');
  let inPart = false;
  let failure: unknown = null;

  /** Appends the body's next chunk to what is held; false once the body has ended. */
  const more = async (): Promise<boolean> => {
    const next = await source.next();
    if (next.done) return false;
    buffer = buffer.length === 0 ? next.value : concat([buffer, next.value]);
    return true;
  };
  const need = async (bytes: number, where: string) => {
    while (buffer.length < bytes) if (!(await more())) throw new MultipartError(`the body ended ${where}`);
  };

  /** The next bytes of the current part, or null at its end (the delimiter after it consumed). */
  const piece = async (): Promise<Uint8Array | null> => {
    for (;;) {
      const at = indexOf(buffer, delimiter);
      if (at === 0) {
        buffer = buffer.subarray(delimiter.length);
        inPart = false;
        return null;
      }
      // Up to the delimiter, or all but what could be the start of one split across chunks.
      const safe = at > 0 ? at : buffer.length - (delimiter.length - 1);
      if (safe > 0) {
        const bytes = buffer.subarray(0, safe);
        buffer = buffer.subarray(safe);
        return bytes;
      }
      if (!(await more())) throw new MultipartError('the body ended inside a part');
    }
  };
  /** `piece`, or the error that stopped the body before: a part's stream and the iteration fail alike. */
  const nextPiece = async (): Promise<Uint8Array | null> => {
    if (failure !== null) throw failure;
    if (!inPart) return null;
    try {
      return await piece();
    } catch (error) {
      failure = error;
      throw error;
    }
  };

  try {
    // The preamble, if any, up to the first delimiter.
    for (let at = indexOf(buffer, delimiter); at < 0; at = indexOf(buffer, delimiter)) {
      buffer = buffer.subarray(Math.max(0, buffer.length - (delimiter.length - 1)));
      if (!(await more())) throw new MultipartError('the body holds no boundary');
    }
    buffer = buffer.subarray(indexOf(buffer, delimiter) + delimiter.length);
    for (let count = 0; ; count += 1) {
      await need(2, 'after a boundary');
      if (buffer[0] === DASH && buffer[1] === DASH) return;
      // Transport padding, then the line's end.
      for (;;) {
        await need(1, 'after a boundary');
        if (buffer[0] !== SPACE && buffer[0] !== TAB) break;
        buffer = buffer.subarray(1);
      }
      await need(2, 'after a boundary');
      if (buffer[0] !== CR || buffer[1] !== LF) throw new MultipartError('a boundary is not followed by a line end');
      if (count >= MAX_PARTS) throw new MultipartError(`the body has more than ${MAX_PARTS} parts`);
      // The headers lie between that line end and an empty line: `\r\n\r\n` right away when there are none.
      let end = indexOf(buffer, HEADER_END);
      while (end < 0) {
        if (buffer.length > HEADER_MAX_BYTES) throw new MultipartError(`a part's headers exceed ${HEADER_MAX_BYTES} bytes`);
        if (!(await more())) throw new MultipartError("the body ended inside a part's headers");
        end = indexOf(buffer, HEADER_END);
      }
      if (end > HEADER_MAX_BYTES) throw new MultipartError(`a part's headers exceed ${HEADER_MAX_BYTES} bytes`);
      const { name, filename } = partHeaders(buffer.subarray(2, Math.max(2, end)));
      buffer = buffer.subarray(end + HEADER_END.length);
      inPart = true;
      const body = new ReadableStream<Uint8Array>(
        {
          async pull(controller) {
            const bytes = await nextPiece();
            if (bytes === null) controller.close();
            else controller.enqueue(bytes);
          },
        },
        // Read only when asked: nothing is pulled ahead of the consumer.
        { highWaterMark: 0 },
      );
      yield { name, filename, body };
      // What the consumer left unread of the part is skipped.
      while ((await nextPiece()) !== null);
    }
  } finally {
    // Stops the body when the reader gives up early (a refused upload, a consumer that stopped).
    await source.return?.();
  }
}
