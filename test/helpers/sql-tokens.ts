import { newId } from '../../shared/ids.js';
import type { Role } from '../../shared/contracts/common.js';
import type { Db } from '../../functions/store/db.js';
import { hashSecret, newSecret } from '../../functions/services/secrets.js';
import { apiTokens, workspaces } from '../../functions/store/schema/index.js';

/**
 * Workspaces and API tokens written straight into the store, as the bootstrap writes its own: for suites about
 * something else than tokens (usage, audit), which need a second token or workspace and nothing of the token
 * API. Nothing is audited.
 */
export async function insertWorkspace(db: Db, name: string): Promise<string> {
  const id = newId('workspace');
  await db.insert(workspaces).values({ id, name });
  return id;
}

/** A token of `role` in `workspaceId`: its id and its secret. */
export async function insertToken(db: Db, input: { workspaceId: string; name: string; role: Role }): Promise<{ id: string; token: string }> {
  const token = newSecret('lnx');
  const id = newId('token');
  await db.insert(apiTokens).values({ id, workspaceId: input.workspaceId, name: input.name, role: input.role, tokenHash: await hashSecret(token) });
  return { id, token };
}
