import { eq } from 'drizzle-orm';
import { openPgStore } from '../../functions/store/pg.js';
import { workspaces } from '../../functions/store/schema/index.js';
import type { TestPlane } from '../helpers/plane.js';

/**
 * Runs `enroll` with a stand-in for a control plane that `startSimNode` (functions/hosts/dev/fleet.ts) and
 * `enrollTestMachine` (test/helpers/machine.ts) accept: they read no more of one than its URL, its workspace and
 * a service context to mint enrollment tokens with. The chaos control planes run in processes of their own, so
 * the tokens are minted here, in their database, as an operator's `POST /api/v1/enrollment-tokens` would.
 */
export async function withEnroller<T>(opts: { databaseUrl: string; url: string }, enroll: (plane: TestPlane) => Promise<T>): Promise<T> {
  const store = await openPgStore(opts.databaseUrl, { max: 4, migrate: false });
  try {
    const [workspace] = await store.db.select({ id: workspaces.id }).from(workspaces).where(eq(workspaces.name, 'default'));
    if (!workspace) throw new Error('the control plane has not created its default workspace');
    return await enroll({ url: opts.url, workspaceId: workspace.id, systemCtx: { db: store.db, actor: 'system' } } as unknown as TestPlane);
  } finally {
    await store.close();
  }
}
