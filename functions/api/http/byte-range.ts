/**
 * What a `Range` header asks of a file of `size` bytes (RFC 9110 section 14): the whole file, one range of it
 * (inclusive bounds), or nothing it holds (416). Only single `bytes` ranges are honoured (`N-`, `N-M`, `-N`):
 * what agents send to resume a download. Anything else (several ranges, another unit, a malformed header) is
 * ignored and the whole file is sent, as the RFC lets a server do.
 */
export type ByteRange = { kind: 'whole' } | { kind: 'part'; start: number; end: number } | { kind: 'unsatisfiable' };

const SINGLE = /^bytes=(\d{0,15})-(\d{0,15})$/;

export function byteRange(header: string | undefined, size: number): ByteRange {
  if (header === undefined) return { kind: 'whole' };
  const match = SINGLE.exec(header.trim());
  if (!match) return { kind: 'whole' };
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return { kind: 'whole' };
  if (first === '') {
    // A suffix: the last N bytes; the last 0 bytes of anything is nothing.
    const length = Number(last);
    if (length === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'part', start: Math.max(0, size - length), end: size - 1 };
  }
  const start = Number(first);
  if (last !== '' && Number(last) < start) return { kind: 'whole' };
  if (start >= size) return { kind: 'unsatisfiable' };
  return { kind: 'part', start, end: last === '' ? size - 1 : Math.min(Number(last), size - 1) };
}
