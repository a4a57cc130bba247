import { z } from 'zod';
import { RowError } from './row-error.js';

/** The answer a row's request got, as OpenAI's batch output writes it: status, the runtime's request id, its body. */
const BatchOutputResponse = z.object({ status_code: z.number().int().min(100).max(599), request_id: z.string(), body: z.unknown() });

/**
 * One line of a batch's output or error file, in OpenAI's format: a row that got an answer (any status) has
 * `response` and a null `error`; a row that got none (refused before it was sent, or out of attempts without an
 * answer) has a null `response` and `error`. `custom_id` is null only for a line that could not be read far enough
 * to name one: another row's id must not be guessed for it.
 */
export const BatchOutputLine = z.object({
  id: z.string(),
  custom_id: z.string().nullable(),
  response: BatchOutputResponse.nullable(),
  error: RowError.nullable(),
});
export type BatchOutputLine = z.infer<typeof BatchOutputLine>;

/**
 * The output line id of row `rowIndex` of job `jobId`. Derived, not drawn: a row written again after a restart
 * keeps its id.
 */
export function batchRequestId(jobId: string, rowIndex: number): string {
  return `batch_req_${jobId}_${rowIndex}`;
}

/** The line of a row that got an answer: a success (2xx) or an HTTP error, its body as the endpoint gave it. */
export function responseLine(input: { id: string; customId: string | null; statusCode: number; requestId: string; body: unknown }): BatchOutputLine {
  return { id: input.id, custom_id: input.customId, response: { status_code: input.statusCode, request_id: input.requestId, body: input.body }, error: null };
}

/** The line of a row that got no answer. */
export function errorLine(input: { id: string; customId: string | null; error: RowError }): BatchOutputLine {
  return { id: input.id, custom_id: input.customId, response: null, error: { code: input.error.code, message: input.error.message } };
}

/** Whether a line belongs in the error file rather than the output file: it got no answer, or not a 2xx one. */
export function isErrorLine(line: BatchOutputLine): boolean {
  return line.response === null || line.response.status_code < 200 || line.response.status_code > 299;
}

/**
 * Results gathered in chunks that finished in any order, as one list in input (row) order. Each row has one line:
 * a row found twice (sent again after a restart, before its checkpoint was kept) keeps its first.
 */
export function orderOutput<T extends { row: number }>(chunks: ReadonlyArray<ReadonlyArray<T>>): T[] {
  const seen = new Set<number>();
  const rows: T[] = [];
  for (const chunk of chunks) {
    for (const result of chunk) {
      if (seen.has(result.row)) continue;
      seen.add(result.row);
      rows.push(result);
    }
  }
  return rows.sort((a, b) => a.row - b.row);
}

/**
 * What may be written next to keep the output in input order: of the results waiting, those from row `next` on
 * without a gap; the rest keep waiting, and results for rows before `next` (written already) are dropped.
 */
export function takeInOrder<T extends { row: number }>(next: number, waiting: readonly T[]): { ready: T[]; waiting: T[]; next: number } {
  const sorted = orderOutput([waiting]).filter((result) => result.row >= next);
  let taken = 0;
  while (taken < sorted.length && sorted[taken]!.row === next + taken) taken += 1;
  return { ready: sorted.slice(0, taken), waiting: sorted.slice(taken), next: next + taken };
}
