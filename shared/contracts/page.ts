import { z } from 'zod';

/**
 * One page of a management list (docs/operations.md, "Lists"). `nextCursor` is opaque: pass it back as
 * `?cursor=` for the next page; null on the last one.
 */
export function pageOf<T extends z.ZodType>(item: T) {
  return z.object({ data: z.array(item), nextCursor: z.string().nullable() });
}

export interface Page<T> {
  data: T[];
  nextCursor: string | null;
}
