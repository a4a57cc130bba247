import { describe, expect, it } from 'vitest';
import { BatchOutputLine, batchRequestId, errorLine, isErrorLine, orderOutput, responseLine, takeInOrder } from '../../shared/batch/output.js';

const answer = { id: 'chatcmpl-1', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }] };

/** A deterministic shuffle (a linear congruential generator), so that a failure can be replayed. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed;
  for (let i = out.length - 1; i > 0; i -= 1) {
    state = (Math.imul(state, 1_103_515_245) + 12_345) >>> 0;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('output lines', () => {
  it('derives the line id from the job and the row, the same every time', () => {
    expect(batchRequestId('job_01J0000000000000000000000A', 42)).toBe('batch_req_job_01J0000000000000000000000A_42');
    expect(batchRequestId('job_a', 1)).not.toBe(batchRequestId('job_a', 2));
    expect(batchRequestId('job_a', 1)).not.toBe(batchRequestId('job_b', 1));
  });

  it("writes a success exactly as OpenAI's batch output does, keys in its order", () => {
    const line = responseLine({ id: 'batch_req_x_0', customId: 'request-1', statusCode: 200, requestId: 'req_abc', body: answer });
    expect(JSON.stringify(line)).toBe(
      `{"id":"batch_req_x_0","custom_id":"request-1","response":{"status_code":200,"request_id":"req_abc","body":${JSON.stringify(answer)}},"error":null}`,
    );
    expect(isErrorLine(line)).toBe(false);
    expect(BatchOutputLine.parse(JSON.parse(JSON.stringify(line)))).toEqual(line);
  });

  it('writes a request answered with an HTTP error as a response with its status and body, and no error', () => {
    const body = { error: { message: 'model not found', type: 'not_found_error', code: 'model_not_found', param: 'model' } };
    const line = responseLine({ id: 'batch_req_x_1', customId: 'request-2', statusCode: 404, requestId: 'req_def', body });
    expect(JSON.stringify(line)).toBe(
      `{"id":"batch_req_x_1","custom_id":"request-2","response":{"status_code":404,"request_id":"req_def","body":${JSON.stringify(body)}},"error":null}`,
    );
    expect(isErrorLine(line)).toBe(true);
  });

  it('writes a row that got no answer with a null response and its error', () => {
    const line = errorLine({ id: 'batch_req_x_2', customId: null, error: { code: 'invalid_json', message: 'row 2: the line is not JSON' } });
    expect(JSON.stringify(line)).toBe(
      '{"id":"batch_req_x_2","custom_id":null,"response":null,"error":{"code":"invalid_json","message":"row 2: the line is not JSON"}}',
    );
    expect(isErrorLine(line)).toBe(true);
    expect(BatchOutputLine.parse(line)).toEqual(line);
  });

  it('sends every status outside 2xx to the error file', () => {
    const at = (statusCode: number) => isErrorLine(responseLine({ id: 'i', customId: 'c', statusCode, requestId: 'r', body: {} }));
    expect([200, 201, 299].map(at)).toEqual([false, false, false]);
    expect([100, 199, 300, 400, 429, 500, 503].map(at)).toEqual([true, true, true, true, true, true, true]);
  });

  it('refuses a line that is not of the format', () => {
    const good = { id: 'i', custom_id: 'c', response: null, error: { code: 'x', message: 'y' } };
    expect(BatchOutputLine.safeParse(good).success).toBe(true);
    for (const bad of [
      { ...good, id: undefined },
      { ...good, error: { code: '', message: 'y' } },
      { ...good, response: { status_code: 99, request_id: 'r', body: {} } },
      { ...good, response: { status_code: 200, body: {} } },
      { ...good, custom_id: 5 },
    ]) {
      expect(BatchOutputLine.safeParse(bad).success).toBe(false);
    }
  });
});

describe('output in input order', () => {
  const results = (rows: number[]) => rows.map((row) => ({ row, line: `line ${row}` }));

  it('sorts chunks that finished in any order by row, the same for every order', () => {
    const chunks = [results([5, 6, 7]), results([0, 2]), results([1]), results([3, 4, 8, 9])];
    const expected = results([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(orderOutput(chunks)).toEqual(expected);
    for (let seed = 1; seed <= 20; seed += 1) expect(orderOutput(shuffled(chunks, seed).map((chunk) => shuffled(chunk, seed)))).toEqual(expected);
  });

  it('keeps one line per row: a row found twice keeps its first', () => {
    expect(
      orderOutput([
        [{ row: 1, line: 'first' }],
        [
          { row: 0, line: 'a' },
          { row: 1, line: 'again' },
        ],
      ]),
    ).toEqual([
      { row: 0, line: 'a' },
      { row: 1, line: 'first' },
    ]);
  });

  it('gives nothing for nothing, and leaves its chunks as they were', () => {
    expect(orderOutput([])).toEqual([]);
    expect(orderOutput([[], []])).toEqual([]);
    const chunk = Object.freeze(results([2, 1, 0]).map((r) => Object.freeze(r)));
    expect(orderOutput([chunk]).map((r) => r.row)).toEqual([0, 1, 2]);
    expect(chunk.map((r) => r.row)).toEqual([2, 1, 0]);
  });

  it('releases only the gapless run from the next row, keeping the rest waiting', () => {
    expect(takeInOrder(0, results([2, 0, 1, 4]))).toEqual({ ready: results([0, 1, 2]), waiting: results([4]), next: 3 });
    expect(takeInOrder(0, results([1, 2]))).toEqual({ ready: [], waiting: results([1, 2]), next: 0 });
    expect(takeInOrder(10, [])).toEqual({ ready: [], waiting: [], next: 10 });
    // A result for a row written already (sent again after a restart) is dropped.
    expect(takeInOrder(3, results([1, 3, 2]))).toEqual({ ready: results([3]), waiting: [], next: 4 });
  });

  it('writes every row once and in order, however the results arrive', () => {
    const rows = shuffled(
      Array.from({ length: 500 }, (_, i) => i),
      7,
    );
    let next = 0;
    let waiting: Array<{ row: number; line: string }> = [];
    const written: number[] = [];
    for (let at = 0; at < rows.length; at += 13) {
      const step = takeInOrder(next, [...waiting, ...results(rows.slice(at, at + 13))]);
      written.push(...step.ready.map((r) => r.row));
      ({ waiting, next } = step);
    }
    expect(written).toEqual(Array.from({ length: 500 }, (_, i) => i));
    expect(waiting).toEqual([]);
  });
});
