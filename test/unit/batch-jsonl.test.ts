import { describe, expect, it } from 'vitest';
import { JsonlSplitter, type JsonlLine } from '../../shared/batch/jsonl.js';
import { MAX_REQUEST_LINE_BYTES, parseRequestLine } from '../../shared/batch/request-line.js';

const bytes = (text: string) => new TextEncoder().encode(text);

/** Every line of `chunks` fed one after the other, then the end. */
function split(chunks: ReadonlyArray<string | Uint8Array>, maxLineBytes?: number): JsonlLine[] {
  const splitter = new JsonlSplitter(maxLineBytes);
  const lines = chunks.flatMap((chunk) => splitter.push(typeof chunk === 'string' ? bytes(chunk) : chunk));
  return [...lines, ...splitter.end()];
}

const texts = (...lines: string[]) => lines.map((text, index) => ({ index, text }));

describe('JsonlSplitter', () => {
  it('cuts lines at \\n and \\r\\n, the last with or without one', () => {
    expect(split(['{"a":1}\n{"b":2}\n'])).toEqual(texts('{"a":1}', '{"b":2}'));
    expect(split(['{"a":1}\r\n{"b":2}'])).toEqual(texts('{"a":1}', '{"b":2}'));
    expect(split(['one'])).toEqual(texts('one'));
  });

  it('skips blank lines without counting them, as OpenAI does', () => {
    expect(split(['a\n\n  \n\t\r\n\r\nb\n\n'])).toEqual(texts('a', 'b'));
    expect(split(['\n\n\r\n'])).toEqual([]);
    expect(split([])).toEqual([]);
    expect(split([''])).toEqual([]);
  });

  it('keeps a carriage return inside a line, and only the one before the line break goes', () => {
    expect(split(['a\rb\r\r\n'])).toEqual(texts('a\rb\r'));
  });

  it('drops a byte-order mark that starts a line', () => {
    expect(split(['\uFEFF{"a":1}\n{"b":2}'])).toEqual(texts('{"a":1}', '{"b":2}'));
  });

  it('reads the same lines wherever the chunks are cut, a multibyte character split included', () => {
    const text = '{"é":"中文"}\r\n\n{"emoji":"😀"}\n{"x":"ünï"}';
    const whole = bytes(text);
    const expected = texts('{"é":"中文"}', '{"emoji":"😀"}', '{"x":"ünï"}');
    expect(split([whole])).toEqual(expected);
    for (let cut = 0; cut <= whole.length; cut += 1) expect(split([whole.subarray(0, cut), whole.subarray(cut)])).toEqual(expected);
    for (let a = 1; a < whole.length; a += 3) {
      for (let b = a; b <= whole.length; b += 5) expect(split([whole.subarray(0, a), whole.subarray(a, b), whole.subarray(b)])).toEqual(expected);
    }
    expect(split(Array.from(whole, (byte) => new Uint8Array([byte])))).toEqual(expected);
  });

  it('gives lines as soon as their break arrives, not at the end', () => {
    const splitter = new JsonlSplitter();
    expect(splitter.push(bytes('{"a":'))).toEqual([]);
    expect(splitter.push(bytes('1}\n{"b"'))).toEqual(texts('{"a":1}'));
    expect(splitter.push(bytes(':2}\n'))).toEqual([{ index: 1, text: '{"b":2}' }]);
    expect(splitter.end()).toEqual([]);
  });

  it('copies what it keeps: a chunk buffer reused by the caller does not change a line', () => {
    const splitter = new JsonlSplitter();
    const buffer = bytes('abc');
    expect(splitter.push(buffer)).toEqual([]);
    buffer.set(bytes('xyz'));
    expect(splitter.push(bytes('\n'))).toEqual(texts('abc'));
  });

  it('makes a line that is not UTF-8 that row error, and goes on with the next row', () => {
    const cut = bytes('中').subarray(0, 2);
    expect(split([bytes('a\n'), new Uint8Array([0x7b, 0xff, 0x7d]), bytes('\n'), cut, bytes('\nb')])).toEqual([
      { index: 0, text: 'a' },
      { index: 1, error: { code: 'invalid_json', message: 'row 1: the line is not UTF-8' } },
      { index: 2, error: { code: 'invalid_json', message: 'row 2: the line is not UTF-8' } },
      { index: 3, text: 'b' },
    ]);
    // A character cut off by the end of the input.
    expect(split([bytes('x'), cut])).toEqual([{ index: 0, error: { code: 'invalid_json', message: 'row 0: the line is not UTF-8' } }]);
  });

  it('takes a line of exactly the largest size, its \\r\\n aside, and makes one byte more a too_long row', () => {
    const ten = 'x'.repeat(10);
    const tooLong = (index: number) => ({ index, error: { code: 'too_long', message: `row ${index}: the line is longer than 10 bytes` } });
    expect(split([`${ten}\n${ten}\r\n${ten}`], 10)).toEqual(texts(ten, ten, ten));
    expect(split([`${ten}x\nok\n${ten}x\r\n${ten}x`], 10)).toEqual([tooLong(0), { index: 1, text: 'ok' }, tooLong(2), tooLong(3)]);
    // Counted in bytes: five two-byte characters fit, six do not.
    expect(split(['ééééé\néééééé'], 10)).toEqual([{ index: 0, text: 'ééééé' }, tooLong(1)]);
    // Over the bound across chunks.
    expect(split(['xxxx', 'xxxx', 'xxx\n', 'next'], 10)).toEqual([tooLong(0), { index: 1, text: 'next' }]);
  });

  it('holds at most one line of the largest size, however long the line it drops', () => {
    const max = 1024 * 1024;
    const splitter = new JsonlSplitter(max);
    const chunk = new Uint8Array(64 * 1024).fill(0x61);
    const lines: JsonlLine[] = [];
    for (let i = 0; i < 160; i += 1) {
      lines.push(...splitter.push(chunk));
      expect((splitter as any).bytes).toBeLessThanOrEqual(max + 1);
    }
    lines.push(...splitter.push(bytes('\n{"after":true}\n')), ...splitter.end());
    expect(lines).toEqual([
      { index: 0, error: { code: 'too_long', message: `row 0: the line is longer than ${max} bytes` } },
      { index: 1, text: '{"after":true}' },
    ]);
  });

  it('bounds lines by the request line size unless told otherwise', () => {
    const line = 'x'.repeat(MAX_REQUEST_LINE_BYTES);
    expect(split([`${line}\n${line}x\n`])).toEqual([
      { index: 0, text: line },
      { index: 1, error: { code: 'too_long', message: `row 1: the line is longer than ${MAX_REQUEST_LINE_BYTES} bytes` } },
    ]);
  });

  it('gives the row indices that parseRequestLine names, one line failing alone', () => {
    const request = (id: string) => JSON.stringify({ custom_id: id, method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: id } });
    const file = `${request('a')}\n\n{broken\r\n${request('b')}\n`;
    const parsed = split([file]).map((line) => {
      if (!('text' in line)) return line.error.message;
      const request = parseRequestLine(line.text, line.index, '/v1/embeddings');
      return request.ok ? request.line.custom_id : request.error.message;
    });
    expect(parsed).toEqual(['a', 'row 1: the line is not JSON', 'b']);
  });
});
