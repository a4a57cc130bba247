import { eq } from 'drizzle-orm';
import { clusterSettings } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { newId } from '../../shared/ids.js';

/** The cluster id: the audience of every machine JWT. Minted once per store. */
export async function loadClusterId(db: Db): Promise<string> {
  await db
    .insert(clusterSettings)
    .values({ key: 'cluster_id', value: newId('cluster') })
    .onConflictDoNothing();
  const [row] = await db.select().from(clusterSettings).where(eq(clusterSettings.key, 'cluster_id'));
  return row!.value as string;
}
