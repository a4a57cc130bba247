/** One move of an alias as the history keeps it. */
export interface AliasMove {
  fromVersionId: string | null;
  toVersionId: string;
  /** A rollback undoes the latest move not already undone. */
  rollback: boolean;
}

/**
 * Where a rollback takes an alias, from its history newest first: the version before the latest move that no
 * rollback has undone yet, so that repeated rollbacks walk back one step each (v3 -> v2 -> v1) instead of
 * swinging between the last two. Null when there is no earlier version (the alias was created by that move).
 */
export function rollbackTarget(movesNewestFirst: readonly AliasMove[]): string | null {
  let undone = 0;
  for (const move of movesNewestFirst) {
    if (move.rollback) undone += 1;
    else if (undone > 0) undone -= 1;
    else return move.fromVersionId;
  }
  return null;
}
