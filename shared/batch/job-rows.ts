import { z } from 'zod';
import type { BatchEndpoint } from '../contracts/openai-batch.js';
import { ChatCompletionRequest } from '../contracts/openai.js';
import { BATCH_BODIES, CustomId } from './request-line.js';
import { describeIssue, quote, type RowError } from './row-error.js';

/** What a built-in job asks of each row: a chat answer, a completion, or embeddings. */
export const BatchJobKind = z.enum(['chat', 'completion', 'embedding']);
export type BatchJobKind = z.infer<typeof BatchJobKind>;

/** The endpoint each kind of job sends its rows to. */
export const JOB_KIND_URLS = {
  chat: '/v1/chat/completions',
  completion: '/v1/completions',
  embedding: '/v1/embeddings',
} as const satisfies Record<BatchJobKind, BatchEndpoint>;

/** The row field each kind reads as its input. */
const INPUT_FIELDS = { chat: 'messages', completion: 'prompt', embedding: 'input' } as const satisfies Record<BatchJobKind, string>;

/**
 * The parameters a job's defaults and a row may set, by kind. A row's other fields are not sent: a Parquet file's
 * columns that are the user's own (a label, an id of theirs) must not reach the runtime as request fields.
 */
const JOB_PARAMETERS: Record<BatchJobKind, readonly string[]> = {
  chat: [
    'max_tokens',
    'max_completion_tokens',
    'temperature',
    'top_p',
    'stop',
    'presence_penalty',
    'frequency_penalty',
    'seed',
    'user',
    'response_format',
    'tools',
    'tool_choice',
  ],
  completion: ['max_tokens', 'temperature', 'top_p', 'stop', 'presence_penalty', 'frequency_penalty', 'seed', 'user'],
  embedding: ['encoding_format', 'dimensions', 'user'],
};

/** The smallest input of each kind: the defaults are checked in a body that holds it. */
const PROBE_INPUTS = { chat: [{ role: 'user', content: '' }], completion: '', embedding: '' } as const;

const RowsFields = {
  kind: BatchJobKind,
  model: ChatCompletionRequest.shape.model,
  defaults: z.record(z.string(), z.unknown()).default({}),
};

/** Refuses a default its kind does not take, or one its endpoint's schema refuses (probed with `model`, else a stand-in). */
function checkDefaults(spec: { kind: BatchJobKind; model?: string; defaults: Record<string, unknown> }, ctx: z.RefinementCtx): void {
  const allowed = JOB_PARAMETERS[spec.kind];
  for (const key of Object.keys(spec.defaults)) {
    if (!allowed.includes(key)) ctx.addIssue({ code: 'custom', message: `a ${spec.kind} job takes no default ${quote(key)}`, path: ['defaults', key] });
  }
  const probe = { ...spec.defaults, model: spec.model ?? 'model', [INPUT_FIELDS[spec.kind]]: PROBE_INPUTS[spec.kind] };
  const parsed = BATCH_BODIES[JOB_KIND_URLS[spec.kind]].safeParse(probe);
  for (const issue of parsed.error?.issues ?? []) ctx.addIssue({ code: 'custom', message: issue.message, path: ['defaults', ...issue.path] });
}

/**
 * A built-in job's rows: the kind, the model every row is sent to, and parameters every row gets unless it sets its
 * own. Defaults are checked at submission by the endpoint's own schema, so that a bad default (a temperature of 5)
 * is refused once rather than failing every row.
 */
export const BatchJobRows = z.object(RowsFields).superRefine(checkDefaults);
export type BatchJobRows = z.infer<typeof BatchJobRows>;

/**
 * `BatchJobRows` as a submission takes them (`JobSubmission`): the model may be left out of a job submitted to a
 * swarm, whose model it then is (docs/jobs.md, "Swarms").
 */
export const BatchJobRowsInput = z.object({ ...RowsFields, model: RowsFields.model.optional() }).superRefine(checkDefaults);

/** One row as the request it becomes, or why it becomes none; either way with its `custom_id`. */
export type RowRequest =
  | { ok: true; customId: string; url: BatchEndpoint; body: Record<string, unknown> }
  | { ok: false; customId: string; error: RowError & { code: 'invalid_request' } };

/**
 * The request of row `index` (0-based) of a built-in job. The row's `custom_id` is its own (a string, or an integer
 * column), else the index. Its input field is required; `messages` may also be JSON text, as a Parquet string column
 * holds it. Its parameters of `JOB_PARAMETERS` override the defaults; a null one (a Parquet column without a value
 * in this row) does not. Never throws: a row that gives no valid body is that row's error.
 */
export function rowRequest(kind: BatchJobKind, model: string, defaults: Readonly<Record<string, unknown>>, row: unknown, index: number): RowRequest {
  let customId = String(index);
  const fail = (message: string): RowRequest => ({ ok: false, customId, error: { code: 'invalid_request', message: `row ${index}: ${message}` } });
  if (typeof row !== 'object' || row === null || Array.isArray(row)) return fail('the row is not an object');
  const fields = row as Record<string, unknown>;
  if (fields.custom_id !== undefined && fields.custom_id !== null) {
    const id = CustomId.safeParse(Number.isSafeInteger(fields.custom_id) ? String(fields.custom_id) : fields.custom_id);
    if (!id.success) return fail(`custom_id: ${describeIssue(id.error)}`);
    customId = id.data;
  }
  const field = INPUT_FIELDS[kind];
  let input = fields[field];
  if (input === undefined || input === null) return fail(`${field} is missing`);
  if (kind === 'chat' && typeof input === 'string') {
    try {
      input = JSON.parse(input);
    } catch {
      return fail('messages is text that is not JSON');
    }
  }
  const body: Record<string, unknown> = { model, [field]: input };
  for (const source of [defaults, fields]) {
    for (const key of JOB_PARAMETERS[kind]) if (source[key] !== undefined && source[key] !== null) body[key] = source[key];
  }
  const url = JOB_KIND_URLS[kind];
  const parsed = BATCH_BODIES[url].safeParse(body);
  if (!parsed.success) return fail(describeIssue(parsed.error));
  return { ok: true, customId, url, body: parsed.data };
}
