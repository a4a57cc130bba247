import { sqlState } from '../db-errors.js';

/** What of an error a log line may carry. */
export interface ErrorFields {
  type: string;
  message: string;
  /** SQLSTATE of a database error, or a system error code (ECONNREFUSED). */
  code?: string;
  /** The names of what a database error concerns, never its values. */
  table?: string;
  column?: string;
  constraint?: string;
  /** Stack frames only: the first line of a stack repeats the message. */
  stack?: string;
}

/** drizzle's message is `Failed query: <sql>\nparams: <values>`: what follows `params:` is the caller's data. */
const PARAMS = /\nparams:[\s\S]*$/;

function frames(stack: string | undefined): string | undefined {
  if (!stack) return undefined;
  const lines = stack.split('\n').filter((line) => line.trimStart().startsWith('at '));
  return lines.length ? lines.join('\n') : undefined;
}

const FIELDS = ['type', 'message', 'code', 'table', 'column', 'constraint', 'stack'] as const;

function isReduced(value: unknown): value is Record<string, unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    !(value instanceof Error) &&
    typeof (value as { type?: unknown }).type === 'string' &&
    typeof (value as { message?: unknown }).message === 'string'
  );
}

/** Only the fields a reduced error has, and only as strings: nothing else of an object rides along. */
function pickFields(value: Record<string, unknown>): ErrorFields {
  const out: Record<string, string> = {};
  for (const key of FIELDS) if (typeof value[key] === 'string') out[key] = (value[key] as string).replace(PARAMS, '');
  return out as unknown as ErrorFields;
}

/**
 * An error as it may be logged: never a query's parameters (drizzle puts them in its message and in `params`)
 * nor values the database repeats (PostgreSQL quotes input in the messages of data errors, class 22, and in the
 * `detail` of integrity errors, class 23). A database error is logged by its SQLSTATE and the names of what it
 * concerns; a string (`err: error.message`) is cut where drizzle's parameters start.
 */
export function errorFields(error: unknown): ErrorFields | string {
  if (typeof error === 'string') return error.replace(PARAMS, '');
  // Already reduced (a call site's `err: errorFields(error)`, then the logger's serializer): keep it, not "[object Object]".
  if (isReduced(error)) return pickFields(error);
  if (!(error instanceof Error)) return { type: typeof error, message: String(error).replace(PARAMS, '') };
  const state = sqlState(error);
  const wrapped = 'params' in error;
  // drizzle wraps the driver's error (`cause`); its own message is the query and the parameters.
  const cause: unknown = (error as { cause?: unknown }).cause;
  const driver = (wrapped && cause instanceof Error ? cause : error) as Error & Record<string, unknown>;
  const fields: ErrorFields = { type: error.name, message: error.message.replace(PARAMS, '') };
  if (state) {
    fields.code = state;
    fields.message = state.startsWith('22') || state.startsWith('23') ? `database error ${state}` : driver.message.replace(PARAMS, '');
    for (const key of ['table', 'column', 'constraint'] as const) if (typeof driver[key] === 'string') fields[key] = driver[key];
  } else if (wrapped) {
    fields.message = driver === error ? 'query failed' : `query failed: ${driver.message.replace(PARAMS, '')}`;
    if (typeof driver.code === 'string') fields.code = driver.code;
  } else if (typeof driver.code === 'string') {
    fields.code = driver.code;
  }
  const stack = frames(error.stack);
  if (stack) fields.stack = stack;
  return fields;
}
