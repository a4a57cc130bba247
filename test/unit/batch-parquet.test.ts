import { parquetMetadata } from 'hyparquet';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { describe, expect, it } from 'vitest';
import { rowRequest } from '../../shared/batch/job-rows.js';
import { errorLine, responseLine } from '../../shared/batch/output.js';
import {
  OUTPUT_PARQUET_COLUMNS,
  outputParquetRow,
  type ParquetColumn,
  parquetRowCount,
  readParquetRows,
  writeParquetRows,
} from '../../shared/batch/parquet.js';

const columns: ParquetColumn[] = [
  { name: 'custom_id', type: 'STRING' },
  { name: 'prompt', type: 'STRING' },
  { name: 'tokens', type: 'INT32' },
  { name: 'big', type: 'INT64' },
  { name: 'score', type: 'DOUBLE' },
  { name: 'keep', type: 'BOOLEAN' },
  { name: 'meta', type: 'JSON' },
];

/** `n` rows of every column type, some values missing. */
function rows(n: number) {
  return Array.from({ length: n }, (_, i) => ({
    custom_id: `row-${i}`,
    prompt: i % 5 === 4 ? null : `prompt ${i}: é中😀`,
    tokens: i,
    big: i * 1_000_000_007,
    score: i / 4,
    keep: i % 2 === 0,
    meta: i % 3 === 0 ? null : { i, tags: ['a', 'b'] },
  }));
}

describe('Parquet', () => {
  it('reads back what it wrote, every column type and null', async () => {
    const written = rows(12);
    const file = writeParquetRows(written, columns);
    expect(parquetRowCount(file)).toBe(12);
    expect(await readParquetRows(file, { rowStart: 0, rowEnd: 12 })).toEqual(written);
  });

  it('writes an empty file, and a file of one row', async () => {
    const empty = writeParquetRows([], columns);
    expect(parquetRowCount(empty)).toBe(0);
    expect(await readParquetRows(empty, { rowStart: 0, rowEnd: 10 })).toEqual([]);
    const one = writeParquetRows(rows(1), columns);
    expect(await readParquetRows(one, { rowStart: 0, rowEnd: 1 })).toEqual(rows(1));
  });

  it('gives null for a column a row lacks', async () => {
    const file = writeParquetRows([{ custom_id: 'a' }, { prompt: 'p' }], columns.slice(0, 2));
    expect(await readParquetRows(file, { rowStart: 0, rowEnd: 2 })).toEqual([
      { custom_id: 'a', prompt: null },
      { custom_id: null, prompt: 'p' },
    ]);
  });

  it('reads any slice of a file of several row groups, the end cut at the last row', async () => {
    const written = rows(25);
    const file = writeParquetRows(written, columns, { rowGroupSize: 10 });
    expect(parquetMetadata(file).row_groups.map((group) => Number(group.num_rows))).toEqual([10, 10, 5]);
    for (const [rowStart, rowEnd] of [
      [0, 25],
      [0, 1],
      [8, 12],
      [9, 21],
      [10, 20],
      [24, 25],
      [20, 100],
    ] as const) {
      expect(await readParquetRows(file, { rowStart, rowEnd })).toEqual(written.slice(rowStart, rowEnd));
    }
    expect(await readParquetRows(file, { rowStart: 25, rowEnd: 30 })).toEqual([]);
    expect(await readParquetRows(file, { rowStart: 5, rowEnd: 5 })).toEqual([]);
  });

  it('decodes only the row groups that hold the slice: a job resumed late never reads the rows before', async () => {
    const file = writeParquetRows(rows(30), columns, { rowGroupSize: 10 });
    const damaged = file.slice();
    // Overwrite every column chunk of the first row group with garbage.
    for (const chunk of parquetMetadata(file).row_groups[0]!.columns) {
      const meta = chunk.meta_data!;
      const start = Number(meta.dictionary_page_offset ?? meta.data_page_offset);
      damaged.fill(0xff, start, start + Number(meta.total_compressed_size));
    }
    expect(await readParquetRows(damaged, { rowStart: 12, rowEnd: 14 })).toEqual(rows(30).slice(12, 14));
    // The damage is real: a slice that reaches into the first group fails.
    await expect(readParquetRows(damaged, { rowStart: 8, rowEnd: 12 })).rejects.toThrow();
  });

  it('reads a Node Buffer that is a view into a larger one', async () => {
    const file = writeParquetRows(rows(20), columns, { rowGroupSize: 7 });
    const padded = Buffer.concat([Buffer.from('junk before the file'), Buffer.from(file), Buffer.from('and after')]);
    const view = padded.subarray(20, 20 + file.length);
    expect(view.byteOffset).toBeGreaterThan(0);
    expect(parquetRowCount(view)).toBe(20);
    expect(await readParquetRows(view, { rowStart: 6, rowEnd: 15 })).toEqual(rows(20).slice(6, 15));
    expect(await readParquetRows(file.buffer as ArrayBuffer, { rowStart: 6, rowEnd: 15 })).toEqual(rows(20).slice(6, 15));
  });

  it("makes values JSON's: a 64-bit integer a number where exact, else text; a timestamp ISO text", async () => {
    const file = parquetWriteBuffer({
      columnData: [
        { name: 'big', data: [2n ** 53n - 1n, 2n ** 60n, -(2n ** 62n)], type: 'INT64' },
        { name: 'at', data: [new Date(0), null, new Date(Date.UTC(2025, 0, 2, 3, 4, 5, 6))], type: 'TIMESTAMP' },
        { name: 'list', data: [[1, 2], [], [3]] },
      ],
    });
    expect(await readParquetRows(file, { rowStart: 0, rowEnd: 3 })).toEqual([
      { big: 2 ** 53 - 1, at: '1970-01-01T00:00:00.000Z', list: [1, 2] },
      { big: '1152921504606846976', at: null, list: [] },
      { big: '-4611686018427387904', at: '2025-01-02T03:04:05.006Z', list: [3] },
    ]);
  });

  it('refuses bytes that are not Parquet, and a slice that is none', async () => {
    expect(() => parquetRowCount(new Uint8Array([1, 2, 3]))).toThrow();
    expect(() => parquetRowCount(new TextEncoder().encode('{"custom_id":"a"}\n'))).toThrow();
    await expect(readParquetRows(new Uint8Array(64), { rowStart: 0, rowEnd: 1 })).rejects.toThrow();
    const file = writeParquetRows(rows(3), columns);
    for (const slice of [
      { rowStart: -1, rowEnd: 2 },
      { rowStart: 2, rowEnd: 1 },
      { rowStart: 0.5, rowEnd: 2 },
      { rowStart: 0, rowEnd: Number.POSITIVE_INFINITY },
    ]) {
      await expect(readParquetRows(file, slice)).rejects.toThrow(RangeError);
    }
  });

  it('writes a job output of custom_id, response and error as JSON text, and reads it back', async () => {
    const body = { object: 'embedding', data: [{ embedding: [0.5, -1] }] };
    const lines = [
      responseLine({ id: 'batch_req_j_0', customId: 'a', statusCode: 200, requestId: 'req_1', body }),
      responseLine({ id: 'batch_req_j_1', customId: 'b', statusCode: 400, requestId: 'req_2', body: { error: { message: 'bad' } } }),
      errorLine({ id: 'batch_req_j_2', customId: null, error: { code: 'too_long', message: 'row 2: long' } }),
    ];
    const file = writeParquetRows(lines.map(outputParquetRow), OUTPUT_PARQUET_COLUMNS);
    const back = await readParquetRows(file, { rowStart: 0, rowEnd: 3 });
    expect(back.map((row) => Object.keys(row))).toEqual(Array(3).fill(['custom_id', 'response', 'error']));
    expect(back[0]).toEqual({ custom_id: 'a', response: JSON.stringify({ status_code: 200, request_id: 'req_1', body }), error: null });
    expect(JSON.parse(back[1]!.response as string)).toEqual(lines[1]!.response);
    expect(back[2]).toEqual({ custom_id: null, response: null, error: '{"code":"too_long","message":"row 2: long"}' });
  });

  it('feeds a chat job from a Parquet file whose messages are JSON text and whose rows override defaults', async () => {
    const file = writeParquetRows(
      [
        { custom_id: 'q1', messages: JSON.stringify([{ role: 'user', content: 'hi' }]), temperature: null, label: 'x' },
        { custom_id: null, messages: JSON.stringify([{ role: 'user', content: 'yo' }]), temperature: 1.5, label: 'y' },
        { custom_id: 'q3', messages: 'not json', temperature: null, label: 'z' },
      ],
      [
        { name: 'custom_id', type: 'STRING' },
        { name: 'messages', type: 'STRING' },
        { name: 'temperature', type: 'DOUBLE' },
        { name: 'label', type: 'STRING' },
      ],
    );
    const requests = (await readParquetRows(file, { rowStart: 0, rowEnd: 3 })).map((row, i) => rowRequest('chat', 'sim-chat', { temperature: 0 }, row, i));
    expect(requests).toEqual([
      { ok: true, customId: 'q1', url: '/v1/chat/completions', body: { model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], temperature: 0 } },
      { ok: true, customId: '1', url: '/v1/chat/completions', body: { model: 'sim-chat', messages: [{ role: 'user', content: 'yo' }], temperature: 1.5 } },
      { ok: false, customId: 'q3', error: { code: 'invalid_request', message: 'row 2: messages is text that is not JSON' } },
    ]);
  });
});
