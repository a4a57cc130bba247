/** Keyset paging of a list: the items after `after` in the list's total order, at most `limit` of them. */
export interface PageRequest<K> {
  after?: K;
  limit: number;
}

export interface RowPage<T> {
  items: T[];
  more: boolean;
}

/** Cuts the rows of a query that read `limit + 1`: the extra row only says that another page follows. */
export function cutPage<T>(rows: readonly T[], limit: number): RowPage<T> {
  return { items: rows.slice(0, limit), more: rows.length > limit };
}
