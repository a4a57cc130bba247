import { describe, expect, it } from 'vitest';
import { isDataError, isStoreUnavailable } from '../../functions/kernel/db-errors.js';

const withCode = (code: string, message = 'boom') => Object.assign(new Error(message), { code });
/** As drizzle wraps a driver error: the driver's error is the cause. */
const wrapped = (cause: Error) => Object.assign(new Error('Failed query: select 1'), { cause });

describe('a store that is away', () => {
  it.each([
    ['a connection exception (class 08)', withCode('08006')],
    ['an administrator shutdown', withCode('57P01')],
    ['a server that cannot take connections yet', wrapped(withCode('57P03'))],
    ['a refused socket, wrapped by drizzle', wrapped(withCode('ECONNREFUSED'))],
    ['a reset socket', withCode('ECONNRESET')],
    ['a closed embedded store', new Error('PGlite is closed')],
    ['a connection ended mid-statement', wrapped(new Error('Connection terminated unexpectedly'))],
    ['a pool that could not get a client in time (a partition)', new Error('timeout exceeded when trying to connect')],
    ['a statement that got no answer', wrapped(new Error('Query read timeout'))],
  ])('is told apart: %s', (_what, error) => {
    expect(isStoreUnavailable(error)).toBe(true);
  });

  it.each([
    ["a value past its column (the request's fault)", withCode('22003')],
    ['a constraint', withCode('23505')],
    ['a broken statement (ours)', withCode('42P01')],
    ['anything else', new Error('unexpected')],
  ])('is not: %s', (_what, error) => {
    expect(isStoreUnavailable(error)).toBe(false);
  });

  it('a data error stays a data error', () => {
    expect(isDataError(withCode('22P05'))).toBe(true);
    expect(isDataError(withCode('57P01'))).toBe(false);
  });
});
