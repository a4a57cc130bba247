import { z } from 'zod';

/** OpenAI's cursor page of `item`s, which its SDKs follow by the last item's id (`after`) while `has_more`. */
export function cursorPage<T extends z.ZodType>(item: T) {
  return z.object({
    object: z.literal('list'),
    data: z.array(item),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  });
}
