import { z } from '@hono/zod-openapi';
import { ApiError } from '../../kernel/errors.js';
import type { Page } from '../../../shared/contracts/page.js';
import type { RowPage } from '../../core/paging.js';

export const PAGE_LIMIT_DEFAULT = 100;
export const PAGE_LIMIT_MAX = 500;
/** Far longer than any cursor minted here (a 64-character name and an id): past it, it is none of ours. */
const CURSOR_MAX_CHARS = 512;

/**
 * `?limit=&cursor=` of every list route (docs/operations.md, "Lists"). `limit` is decimal digits only: `1e2`,
 * `0x10` or ` 5` would coerce to a number, but are not a count a client means.
 */
export const PageQuery = z.object({
  limit: z
    .string()
    .regex(/^[0-9]+$/, `limit must be an integer from 1 to ${PAGE_LIMIT_MAX}`)
    .transform(Number)
    .pipe(z.number().int().min(1, `limit must be at least 1`).max(PAGE_LIMIT_MAX, `limit must be at most ${PAGE_LIMIT_MAX}`))
    .default(PAGE_LIMIT_DEFAULT)
    .openapi({ type: 'integer', minimum: 1, maximum: PAGE_LIMIT_MAX, default: PAGE_LIMIT_DEFAULT, param: { description: 'Items per page' } }),
  cursor: z
    .string()
    .optional()
    .openapi({ param: { description: "The previous page's `nextCursor`; omit it for the first page" } }),
});

const invalidCursor = () => new ApiError('invalid_cursor', 'cursor is not one this list gave out; start again without it');

/**
 * The keyset of a list: its cursor is base64url of the JSON of the last item's sort key. Clients treat it as
 * opaque; it is not signed, as it grants nothing (every page is still filtered by the caller's workspace).
 * Anything that does not decode to a key of this list's shape is 400 `invalid_cursor`, and the answer never
 * repeats it.
 */
export function keyset<T, K extends z.ZodType>(key: K, keyOf: (item: T) => z.output<K>) {
  return {
    after(cursor: string | undefined): z.output<K> | undefined {
      if (cursor === undefined) return undefined;
      if (cursor.length > CURSOR_MAX_CHARS || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalidCursor();
      const bytes = Buffer.from(cursor, 'base64url');
      // Node decodes leniently (a dangling character, bits past the last byte): only the canonical form is ours.
      if (bytes.toString('base64url') !== cursor) throw invalidCursor();
      let json: unknown;
      try {
        json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
      } catch {
        throw invalidCursor();
      }
      const parsed = key.safeParse(json);
      if (!parsed.success) throw invalidCursor();
      return parsed.data;
    },
    page(rows: RowPage<T>): Page<T> {
      const last = rows.items.at(-1);
      return { data: rows.items, nextCursor: rows.more && last !== undefined ? Buffer.from(JSON.stringify(keyOf(last))).toString('base64url') : null };
    },
  };
}
