/** An OpenAI-style error answer, thrown while a request is read and answered by the ledger's `fail`. */
export class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null,
    readonly code: string | null,
  ) {
    super(message);
  }
}

export function badRequest(message: string, param: string | null): RequestError {
  return new RequestError(400, message, 'invalid_request_error', param, null);
}

export function errorBody(message: string, type: string, code: string | null, param: string | null): string {
  return JSON.stringify({ error: { message, type, code, param } });
}

export const DEADLINE_ERROR = { message: 'request deadline exceeded', type: 'server_error', code: 'deadline_exceeded' } as const;
export const FAILURE_ERROR = { message: 'simulated runtime failure', type: 'server_error', code: 'simulated_failure' } as const;

export const simulatedFailure = () => new RequestError(500, FAILURE_ERROR.message, FAILURE_ERROR.type, null, FAILURE_ERROR.code);
