import { has, type RowRanges } from './checkpoint.js';
import { JsonlSplitter, type JsonlLine } from './jsonl.js';
import { parquetRowCount, readParquetRows, type ParquetBytes } from './parquet.js';

/** Parquet rows decoded at once: a slice of row groups, not the file. */
const PARQUET_SLICE = 1_000;

/**
 * The rows of a job's input that are not done yet, read from the start. `read` counts every row passed, done or
 * not: once the input is read to its end it is the input's total, also for a resumed runner whose last rows (or
 * every row) an earlier attempt had finished and which therefore yields none of them.
 */
export class PendingRows {
  read = 0;

  constructor(private readonly done: RowRanges) {}

  /** A JSONL input's lines not done yet, one line held at a time. */
  async *jsonl(body: ReadableStream<Uint8Array>): AsyncGenerator<JsonlLine> {
    const splitter = new JsonlSplitter();
    const reader = body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        for (const line of done ? splitter.end() : splitter.push(value)) {
          this.read = line.index + 1;
          if (!has(this.done, line.index)) yield line;
        }
        if (done) return;
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  }

  /** A Parquet input's rows not done yet, a slice at a time: the file is held (its footer is at its end), its rows are not. */
  async *parquet(bytes: ParquetBytes): AsyncGenerator<{ index: number; value: Record<string, unknown> }> {
    const total = parquetRowCount(bytes);
    for (let start = 0; start < total; start += PARQUET_SLICE) {
      const end = Math.min(total, start + PARQUET_SLICE);
      // A slice already done is not decoded again.
      let pending = false;
      for (let i = start; i < end && !pending; i++) pending = !has(this.done, i);
      if (pending) {
        const slice = await readParquetRows(bytes, { rowStart: start, rowEnd: end });
        for (const [offset, value] of slice.entries()) {
          const index = start + offset;
          this.read = index + 1;
          if (!has(this.done, index)) yield { index, value };
        }
      }
      this.read = end;
    }
  }
}
