import type { Page } from '../../shared/contracts/page.js';

/**
 * Every item of a paged management list (docs/operations.md, "Lists"), following `nextCursor` to the last page:
 * for callers that need the whole list, which one page would cap at its limit.
 */
export async function allPages<T>(get: (path: string) => Promise<Response>, path: string): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | null = null;
  do {
    const response = await get(`${path}?limit=500${cursor === null ? '' : `&cursor=${cursor}`}`);
    if (!response.ok) throw new Error(`GET ${path}: ${response.status} ${await response.text()}`);
    const page = (await response.json()) as Page<T>;
    items.push(...page.data);
    cursor = page.nextCursor;
  } while (cursor !== null);
  return items;
}
