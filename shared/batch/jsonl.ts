import { MAX_REQUEST_LINE_BYTES } from './request-line.js';
import type { RowError } from './row-error.js';

type JsonlError = RowError & { code: 'too_long' | 'invalid_json' };

/** A row of a JSONL input: its text, or why it has none (too long, or not UTF-8). */
export type JsonlLine = { index: number; text: string } | { index: number; error: JsonlError };

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;
const BLANK = /^[ \t\r]*$/;

/**
 * Cuts JSONL bytes into lines as they arrive, chunk by chunk, without holding more than one line. Lines end at
 * `\n` or `\r\n`; the last may end without one. Blank lines (empty, or spaces and tabs) are skipped and not counted,
 * as OpenAI's Batch API ignores them: `index` is the 0-based row index among the other lines, the one checkpoints
 * and output use. A byte-order mark that starts a line (a file saved by Windows tools) is dropped. A line is split
 * on bytes, not characters (no byte of a multibyte UTF-8 character is `\n`), and decoded whole, so a character
 * split across chunks is read as one. A line over `maxLineBytes` is that row's `too_long` error: its bytes are
 * dropped as they come. A line that is not UTF-8 is that row's `invalid_json` error.
 */
export class JsonlSplitter {
  private parts: Uint8Array[] = [];
  private bytes = 0;
  private tooLong = false;
  private index = 0;
  private readonly decoder = new TextDecoder('utf-8', { fatal: true });

  constructor(private readonly maxLineBytes: number = MAX_REQUEST_LINE_BYTES) {}

  /** The lines that `chunk` completes. The chunk is copied where kept: the caller may reuse its buffer. */
  push(chunk: Uint8Array): JsonlLine[] {
    const lines: JsonlLine[] = [];
    let from = 0;
    while (from < chunk.length) {
      const newline = chunk.indexOf(NEWLINE, from);
      this.keep(chunk.subarray(from, newline < 0 ? chunk.length : newline));
      if (newline < 0) break;
      const line = this.take();
      if (line) lines.push(line);
      from = newline + 1;
    }
    return lines;
  }

  /** The last line, when the input does not end with a line break. */
  end(): JsonlLine[] {
    const line = this.take();
    return line ? [line] : [];
  }

  private keep(bytes: Uint8Array): void {
    if (this.tooLong || bytes.length === 0) return;
    // One byte over the bound is kept: it may be the `\r` of a line exactly at the bound.
    if (this.bytes + bytes.length > this.maxLineBytes + 1) {
      this.tooLong = true;
      this.parts = [];
      this.bytes = 0;
      return;
    }
    this.parts.push(bytes.slice());
    this.bytes += bytes.length;
  }

  private take(): JsonlLine | null {
    const read = this.read();
    this.parts = [];
    this.bytes = 0;
    this.tooLong = false;
    if (typeof read === 'string' && BLANK.test(read)) return null;
    const index = this.index++;
    return typeof read === 'string' ? { index, text: read } : { index, error: { code: read.code, message: `row ${index}: ${read.message}` } };
  }

  /** The line held, as text, or why it is none. */
  private read(): string | JsonlError {
    if (this.tooLong) return this.overBound();
    const line = this.parts.length === 1 ? this.parts[0]! : concat(this.parts, this.bytes);
    const length = line[line.length - 1] === CARRIAGE_RETURN ? line.length - 1 : line.length;
    if (length > this.maxLineBytes) return this.overBound();
    try {
      return this.decoder.decode(line.subarray(0, length));
    } catch {
      return { code: 'invalid_json', message: 'the line is not UTF-8' };
    }
  }

  private overBound(): JsonlError {
    return { code: 'too_long', message: `the line is longer than ${this.maxLineBytes} bytes` };
  }
}

function concat(parts: readonly Uint8Array[], bytes: number): Uint8Array {
  const line = new Uint8Array(bytes);
  let at = 0;
  for (const part of parts) {
    line.set(part, at);
    at += part.length;
  }
  return line;
}
