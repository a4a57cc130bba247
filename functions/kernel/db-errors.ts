/** SQLSTATEs are five characters of digits and capitals (`22003`, `42P01`); system errors (`ECONNREFUSED`) are not. */
const SQLSTATE = /^[0-9A-Z]{5}$/;

/** The SQLSTATE of a database error, whether the driver's own or wrapped by drizzle (`cause`). */
export function sqlState(error: unknown): string | undefined {
  for (let e = error, depth = 0; e instanceof Error && depth < 3; e = (e as { cause?: unknown }).cause, depth += 1) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && SQLSTATE.test(code)) return code;
  }
  return undefined;
}

/**
 * True when a statement failed for a value it carried (SQLSTATE class 22, data exception: a NUL byte, an
 * integer past its column, a timestamp out of range), not for the store or the statement itself.
 */
export function isDataError(error: unknown): boolean {
  return sqlState(error)?.startsWith('22') ?? false;
}

/**
 * True when one row of a batch, not the batch, is at fault: a data exception or an integrity violation (class
 * 23), or a value that could not even be made a parameter (an invalid Date throws a RangeError, a BigInt a
 * TypeError, before anything is sent). A store that is down or a broken statement is no row's fault.
 */
export function isRowFault(error: unknown): boolean {
  const state = sqlState(error);
  if (state?.startsWith('22') || state?.startsWith('23')) return true;
  const cause = (error as { cause?: unknown } | null)?.cause;
  return [error, cause].some((e) => e instanceof RangeError || e instanceof TypeError);
}

/** Errors of a store that is away (an outage, a restart), as opposed to one that refused a statement. */
const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * True when the store could not be reached or went away mid-statement: a connection exception (SQLSTATE class
 * 08), an operator or crash shutdown or a server that cannot take connections yet (57P01-57P03), a socket error,
 * a closed pool or a closed embedded store. The client is not at fault and may retry: 503, not 500.
 */
export function isStoreUnavailable(error: unknown): boolean {
  const state = sqlState(error);
  if (state?.startsWith('08') || state === '57P01' || state === '57P02' || state === '57P03') return true;
  for (let e = error, depth = 0; e instanceof Error && depth < 3; e = (e as { cause?: unknown }).cause, depth += 1) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && UNAVAILABLE_CODES.has(code)) return true;
    // pg's own timeouts (connect, query read) mean a store that does not answer: a partition, not a bad statement.
    if (
      /^(PGlite is closed|Connection terminated|Cannot use a pool after calling end on the pool|timeout expired|Query read timeout|timeout exceeded when trying to connect)/.test(
        e.message,
      )
    )
      return true;
  }
  return false;
}
