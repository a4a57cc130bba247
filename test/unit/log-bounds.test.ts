import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Hono } from 'hono';
import pino from 'pino';
import { sql } from 'drizzle-orm';
import { openPgliteStore } from '../../functions/store/pglite.js';
import type { Store } from '../../functions/store/db.js';
import { createLogger } from '../../functions/kernel/telemetry/logger.js';
import { errorFields } from '../../functions/kernel/telemetry/error-fields.js';
import { handleError } from '../../functions/api/http/errors.js';
import { handleOpenAIError } from '../../functions/api/v1/errors.js';
import type { AppEnv, Ports } from '../../functions/dataplane/ports.js';

/**
 * A failing query never logs its parameters (issue 7, finding 1): drizzle puts them in its error's message
 * (`Failed query: … params: …`), and PostgreSQL repeats input values in its own messages (22P02) and details.
 */
const SECRET = 'secret-param-91c2';

function capture() {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  return { lines, sink };
}

describe('what a failing query leaves in the logs', () => {
  let store: Store;
  const failures: Record<string, Error> = {};
  beforeAll(async () => {
    store = await openPgliteStore();
    const fail = async (query: ReturnType<typeof sql>) => {
      try {
        await store.db.execute(query);
      } catch (error) {
        return error as Error;
      }
      throw new Error('the query was expected to fail');
    };
    failures.badInteger = await fail(sql`select ${SECRET}::int as n`);
    failures.nul = await fail(sql`select ${`a\u0000${SECRET}`}::text as t`);
    failures.noTable = await fail(sql`select * from ${sql.raw('no_such_table')} where x = ${SECRET}`);
    failures.cast = await fail(sql`select * from (values (1)) v(n) where n = ${SECRET}::int`);
  });
  afterAll(async () => {
    await store?.close();
  });

  it('drizzle carries the parameters in its message (the premise)', () => {
    for (const error of Object.values(failures)) expect(`${error.message}\n${error.stack}`).toContain(SECRET);
  });

  it('errorFields keeps the SQLSTATE and drops the parameters, the echoed values and the message of a data error', () => {
    expect(errorFields(failures.badInteger)).toMatchObject({ code: '22P02' });
    expect(errorFields(failures.nul)).toMatchObject({ code: expect.stringMatching(/^22/) });
    expect(errorFields(failures.noTable)).toMatchObject({ code: '42P01' });
    for (const error of Object.values(failures)) expect(JSON.stringify(errorFields(error))).not.toContain(SECRET);
    // A plain error keeps its message; a string (err: error.message) is cut where drizzle's parameters start.
    expect(errorFields(new Error('boom'))).toMatchObject({ message: 'boom' });
    expect(JSON.stringify(errorFields(failures.noTable!.message))).not.toContain(SECRET);
  });

  it("the process logger's err serializer drops them too, whatever a call site passes", () => {
    const { lines, sink } = capture();
    const logger = createLogger({ level: 'info', destination: sink });
    for (const error of Object.values(failures)) {
      logger.error({ err: error }, 'query failed');
      logger.error({ err: error.message }, 'query failed');
    }
    expect(lines).toHaveLength(Object.keys(failures).length * 2);
    for (const line of lines) expect(line).not.toContain(SECRET);
  });

  it('an error reduced at the call site (err: errorFields(error)) keeps its message and code through the serializer', () => {
    const { lines, sink } = capture();
    const logger = createLogger({ level: 'info', destination: sink });
    logger.warn({ err: errorFields(failures.noTable) }, 'the store did not answer');
    logger.warn({ err: errorFields(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })) }, 'bus error');
    expect(lines[0]).toContain('42P01');
    expect(lines[0]).not.toContain('[object Object]');
    expect(lines[0]).not.toContain(SECRET);
    expect(lines[1]).toContain('connect ECONNREFUSED');
    // Only the fields of a reduced error ride along, whatever else an object carries.
    expect(errorFields({ type: 'x', message: 'm', values: SECRET })).toEqual({ type: 'x', message: 'm' });
  });

  it('the error handlers of /api/v1, /agent/v1 and /v1 log neither parameters nor values, and answer a data error with 400', async () => {
    const { lines, sink } = capture();
    const logger = pino({ level: 'debug' }, sink);
    for (const [surface, handler] of [
      ['/api/v1', handleError],
      ['/v1', handleOpenAIError],
    ] as const) {
      const app = new Hono<AppEnv>();
      app.use('*', async (c, next) => {
        c.set('ports', { logger } as unknown as Ports);
        c.set('requestId', 'req-1');
        await next();
      });
      app.onError(handler);
      for (const [name, error] of Object.entries(failures)) app.get(`/${name}`, () => Promise.reject(error));
      expect((await app.request('/noTable')).status, surface).toBe(500);
      for (const name of ['badInteger', 'nul']) {
        const response = await app.request(`/${name}`);
        expect(response.status, `${surface} ${name}`).toBe(400);
        expect(await response.text()).not.toContain(SECRET);
      }
    }
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(line).not.toContain(SECRET);
  });
});
