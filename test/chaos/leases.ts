import pg from 'pg';
import type { Scope } from './scenario.js';

/**
 * Which control-plane instance holds each machine's stream, read from the database: the machine view says only
 * whether a stream is attached, not through which instance, and after an instance dies that is the question.
 */
export async function leaseReader(scope: Scope, databaseUrl: string) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  // A stopped cluster ends the connection; that must not end the run.
  client.on('error', () => {});
  scope.defer('the lease reader', () => client.end());
  return {
    /** Machine name -> instance id of its stream lease. */
    async holders(): Promise<Map<string, string>> {
      const { rows } = await client.query<{ name: string; instance: string }>(
        'select m.name, l.instance_id as instance from stream_leases l join machines m on m.id = l.machine_id',
      );
      return new Map(rows.map((r) => [r.name, r.instance]));
    },
    /** Instance ids in the order the instances started. */
    async instances(): Promise<string[]> {
      const { rows } = await client.query<{ id: string }>('select id from instances order by started_at');
      return rows.map((r) => r.id);
    },
  };
}
