import { type AsyncBuffer, parquetMetadata, parquetReadObjects } from 'hyparquet';
import { parquetWriteBuffer } from 'hyparquet-writer';
import type { BatchOutputLine } from './output.js';

/** A column written to Parquet and the type it is stored as (`JSON`: text a reader may parse into values). */
export interface ParquetColumn {
  name: string;
  type: 'STRING' | 'JSON' | 'INT32' | 'INT64' | 'DOUBLE' | 'BOOLEAN';
}

/** A Parquet file in memory: an ArrayBuffer, or bytes such as a Node Buffer (which may be a view into a larger one). */
export type ParquetBytes = ArrayBuffer | Uint8Array;

/** Rows in a Parquet file, from its footer alone. Throws when the bytes are not Parquet: the job fails, not a row. */
export function parquetRowCount(bytes: ParquetBytes): number {
  return Number(parquetMetadata(bytes).num_rows);
}

/**
 * Rows `rowStart` (inclusive) to `rowEnd` (exclusive, cut at the file's end) of a Parquet file, each a plain object
 * of its columns. Only the row groups that hold the slice are decoded, so that a job resumed near its end does not
 * decode the file again. Values are made JSON's: a 64-bit integer is a number where it is exact (else its decimal
 * text), a timestamp its ISO text. Throws when the bytes are not Parquet.
 */
export async function readParquetRows(bytes: ParquetBytes, slice: { rowStart: number; rowEnd: number }): Promise<Record<string, unknown>[]> {
  const { rowStart, rowEnd } = slice;
  if (!Number.isSafeInteger(rowStart) || !Number.isSafeInteger(rowEnd) || rowStart < 0 || rowEnd < rowStart) {
    throw new RangeError(`rows ${rowStart} to ${rowEnd} are no slice of a file`);
  }
  const metadata = parquetMetadata(bytes);
  const end = Math.min(rowEnd, Number(metadata.num_rows));
  if (rowStart >= end) return [];
  const rows = await parquetReadObjects({ file: asFile(bytes), metadata, rowStart, rowEnd: end });
  return rows.map((row) => plain(row) as Record<string, unknown>);
}

/**
 * The file as the reader takes it: a view is read a range at a time, never copied whole. Through its ArrayBuffer:
 * a Node Buffer's `slice` is a view of the same memory, whose `.buffer` would be the whole pool.
 */
function asFile(bytes: ParquetBytes): AsyncBuffer {
  if (bytes instanceof ArrayBuffer) return bytes;
  return {
    byteLength: bytes.byteLength,
    slice: (start, end = bytes.byteLength) => bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + Math.min(end, bytes.byteLength)) as ArrayBuffer,
  };
}

/**
 * Rows as a Parquet file of `columns` (a row without a column's value has null there). An `INT64` column takes
 * numbers as well as bigints, as `readParquetRows` gives them.
 */
export function writeParquetRows(rows: readonly object[], columns: readonly ParquetColumn[], options: { rowGroupSize?: number } = {}): Uint8Array {
  const cell = (row: object, { name, type }: ParquetColumn): unknown => {
    const value = (row as Record<string, unknown>)[name] ?? null;
    return type === 'INT64' && typeof value === 'number' ? BigInt(value) : value;
  };
  const buffer = parquetWriteBuffer({
    columnData: columns.map((column) => ({ name: column.name, type: column.type, data: rows.map((row) => cell(row, column)) })),
    ...(options.rowGroupSize === undefined ? {} : { rowGroupSize: options.rowGroupSize }),
  });
  return new Uint8Array(buffer);
}

/**
 * The columns of a Parquet job's output (one row per input row, in input order): `custom_id`, and the output line's
 * `response` and `error` as JSON text, null where the line has none. Text rather than Parquet's JSON type, so that
 * every reader gives the same string whatever it does with JSON; the output line's `id` is left out, as it is
 * derived from the job and the row.
 */
export const OUTPUT_PARQUET_COLUMNS: readonly ParquetColumn[] = [
  { name: 'custom_id', type: 'STRING' },
  { name: 'response', type: 'STRING' },
  { name: 'error', type: 'STRING' },
];

/** An output line as a row of `OUTPUT_PARQUET_COLUMNS`. */
export function outputParquetRow(line: BatchOutputLine): { custom_id: string | null; response: string | null; error: string | null } {
  return {
    custom_id: line.custom_id,
    response: line.response === null ? null : JSON.stringify(line.response),
    error: line.error === null ? null : JSON.stringify(line.error),
  };
}

function plain(value: unknown): unknown {
  if (typeof value === 'bigint') return Number.isSafeInteger(Number(value)) ? Number(value) : value.toString();
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return value.map(plain);
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([key, field]) => [key, plain(field)]));
  return value;
}
