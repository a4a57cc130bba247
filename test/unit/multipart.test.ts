import { describe, expect, it } from 'vitest';
import { formBoundary, formParts, MultipartError } from '../../functions/api/http/multipart.js';

/**
 * The streaming multipart/form-data reader of `POST /v1/files`: what undici's own FormData writes is read back part by
 * part, whatever the chunks it arrives in, and a body that breaks the format is refused rather than misread.
 */

const encoder = new TextEncoder();

/** A body as undici (Node's fetch, the OpenAI SDK) writes a form, and its content type. */
async function encodedForm(form: FormData): Promise<{ bytes: Uint8Array; contentType: string }> {
  const request = new Request('http://form.test/', { method: 'POST', body: form });
  return { bytes: new Uint8Array(await request.arrayBuffer()), contentType: request.headers.get('content-type')! };
}

/** `bytes` in chunks of `size` (the last shorter), as a body arrives. */
async function* chunked(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.slice(at, at + size);
}

/** Every part of the body read whole: name, file name and bytes. */
async function readForm(chunks: AsyncIterable<Uint8Array>, boundary: string) {
  const parts: Array<{ name: string; filename: string | null; bytes: Uint8Array }> = [];
  for await (const part of formParts(chunks, boundary)) {
    parts.push({ name: part.name, filename: part.filename, bytes: new Uint8Array(await new Response(part.body).arrayBuffer()) });
  }
  return parts;
}

const raw = (text: string) => chunked(encoder.encode(text), 7);

describe('formBoundary', () => {
  it('reads the boundary of multipart/form-data only', () => {
    expect(formBoundary('multipart/form-data; boundary=abc')).toBe('abc');
    expect(formBoundary('Multipart/Form-Data;boundary="a b:c"')).toBe('a b:c');
    expect(formBoundary('multipart/mixed; boundary=abc')).toBeNull();
    expect(formBoundary('application/json')).toBeNull();
    expect(formBoundary('multipart/form-data')).toBeNull();
    expect(formBoundary(`multipart/form-data; boundary=${'x'.repeat(71)}`)).toBeNull();
    expect(formBoundary(undefined)).toBeNull();
  });
});

describe('formParts', () => {
  it("reads undici's FormData back, byte for byte, in chunks of any size", async () => {
    // Bytes that look like the start of a delimiter, and every byte value.
    const file = new Uint8Array(70_000).map((_, i) => (i % 997 === 0 ? 13 : i % 991 === 0 ? 45 : (i * 31) & 0xff));
    const form = new FormData();
    form.append('purpose', 'batch');
    form.append('file', new Blob([file]), 'rows "1".jsonl');
    form.append('note', 'é\r\n--not a boundary');
    const { bytes, contentType } = await encodedForm(form);
    const boundary = formBoundary(contentType)!;
    for (const size of [1, 2, 3, 41, 1024, 65_536, bytes.length]) {
      const parts = await readForm(chunked(bytes, size), boundary);
      expect(
        parts.map((p) => [p.name, p.filename]),
        `chunks of ${size}`,
      ).toEqual([
        ['purpose', null],
        // undici writes a quote in a file name as %22: it is kept as it came.
        ['file', 'rows %221%22.jsonl'],
        ['note', null],
      ]);
      expect(new TextDecoder().decode(parts[0]!.bytes)).toBe('batch');
      expect(Buffer.from(parts[1]!.bytes).equals(Buffer.from(file)), `chunks of ${size}`).toBe(true);
      expect(new TextDecoder().decode(parts[2]!.bytes)).toBe('é\r\n--not a boundary');
    }
  });

  it('skips a part left unread, and reads empty parts, a preamble, padding and filename*', async () => {
    const body = [
      'preamble to ignore\r\n--b  \r\n',
      'Content-Disposition: form-data; name="skipped"\r\n\r\n',
      'never read\r\n--b\r\n',
      'Content-Disposition: form-data; name=file; filename*=UTF-8\'\'%E2%82%AC%20rows.jsonl; filename="fallback"\r\n',
      'Content-Type: application/jsonl\r\n\r\n',
      '\r\n--b\r\n',
      'Content-Disposition: form-data; name="purpose"\r\n\r\n',
      'user_data\r\n--b--\r\nepilogue',
    ].join('');
    const seen: Array<[string, string | null, string]> = [];
    for await (const part of formParts(raw(body), 'b')) {
      if (part.name === 'skipped') continue;
      seen.push([part.name, part.filename, await new Response(part.body).text()]);
    }
    expect(seen).toEqual([
      ['file', '€ rows.jsonl', ''],
      ['purpose', null, 'user_data'],
    ]);
  });

  it('refuses bodies that break the format', async () => {
    const part = 'Content-Disposition: form-data; name="purpose"\r\n\r\nbatch';
    const cases: Record<string, string> = {
      'no boundary at all': 'just some bytes',
      'no closing boundary': `--b\r\n${part}`,
      'a body that ends after a boundary': `--b\r\n${part}\r\n--b`,
      'no line end after a boundary': `--bX\r\n${part}\r\n--b--`,
      'no Content-Disposition': '--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--',
      'no headers': '--b\r\n\r\nx\r\n--b--',
      'not form-data': '--b\r\nContent-Disposition: attachment; name="x"\r\n\r\nx\r\n--b--',
      'no field name': '--b\r\nContent-Disposition: form-data; filename="x"\r\n\r\nx\r\n--b--',
      'an unterminated quote': '--b\r\nContent-Disposition: form-data; name="x\r\n\r\nx\r\n--b--',
      'a header line without a colon': '--b\r\nContent-Disposition: form-data; name="x"\r\nnonsense\r\n\r\nx\r\n--b--',
      'headers that never end': `--b\r\nContent-Disposition: form-data; name="x"\r\nX-Pad: ${'p'.repeat(9000)}\r\n\r\nx\r\n--b--`,
      'too many parts': `--b\r\n${`${part}\r\n--b\r\n`.repeat(17)}${part}\r\n--b--`,
      'a filename* that is not UTF-8': "--b\r\nContent-Disposition: form-data; name=file; filename*=ISO-8859-1''x\r\n\r\nx\r\n--b--",
    };
    for (const [what, body] of Object.entries(cases)) {
      await expect(readForm(raw(body), 'b'), what).rejects.toBeInstanceOf(MultipartError);
    }
  });

  it("passes an error of the body itself through, to the part's stream and the iteration alike", async () => {
    const limit = new Error('over the limit');
    async function* broken() {
      yield encoder.encode('--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\nsome bytes');
      throw limit;
    }
    const parts = formParts(broken(), 'b');
    const first = await parts.next();
    expect(first.done).toBe(false);
    const part = first.value as { body: ReadableStream<Uint8Array> };
    await expect(new Response(part.body).arrayBuffer()).rejects.toBe(limit);
    await expect(parts.next()).rejects.toBe(limit);
  });

  it('stops reading the body when the reader gives up', async () => {
    let returned = false;
    async function* endless() {
      try {
        yield encoder.encode('--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n');
        for (;;) yield new Uint8Array(1024);
      } finally {
        returned = true;
      }
    }
    for await (const part of formParts(endless(), 'b')) {
      const reader = part.body.getReader();
      await reader.read();
      await reader.cancel();
      break;
    }
    expect(returned).toBe(true);
  });
});
