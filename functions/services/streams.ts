import { Assignment, WorkerAssignment } from '../../shared/contracts/desired.js';
import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import { SignJWT } from 'jose';
import { assignments, machines, runs, runWorkers, streamLeases } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { queryRows } from '../store/rows.js';
import { revealSecretEnv } from './secret-env.js';
import { withArtifactUrls } from './artifact-urls.js';
import type { ArtifactStore } from '../kernel/ports/artifact-store.js';
import type { ServiceCtx, ServicePorts } from './service-context.js';
import type { Db } from '../store/db.js';
import { column } from '../store/rows.js';

/**
 * Records that this instance now holds the machine's stream. The newest connection wins: a reconnecting agent
 * takes over its own lease from a connection that has not noticed it is dead yet.
 */
export async function attachStream({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config' | 'instanceId'>;
  input: { machineId: string; connectionId: string };
}): Promise<void> {
  const ttl = ctx.config.streamLeaseTtlMs / 1000;
  const values = {
    instanceId: ctx.instanceId,
    connectionId: input.connectionId,
    attachedAt: sql`now()`,
    expiresAt: sql`now() + make_interval(secs => ${ttl})`,
  };
  await ctx.db
    .insert(streamLeases)
    .values({ machineId: input.machineId, ...values })
    .onConflictDoUpdate({ target: streamLeases.machineId, set: values });
}

/** Renews the lease; false when another connection has taken it over (this one must close). */
export async function renewStream({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { machineId: string; connectionId: string };
}): Promise<boolean> {
  const ttl = ctx.config.streamLeaseTtlMs / 1000;
  const renewed = await ctx.db
    .update(streamLeases)
    .set({ expiresAt: sql`now() + make_interval(secs => ${ttl})` })
    .where(and(eq(streamLeases.machineId, input.machineId), eq(streamLeases.connectionId, input.connectionId)))
    .returning({ machineId: streamLeases.machineId });
  return renewed.length === 1;
}

/** The agent answered a ping on this stream: its link is alive, not just its TCP connection. */
export async function answerPing({ ctx, input }: { ctx: ServiceCtx; input: { machineId: string; connectionId: string } }): Promise<boolean> {
  const answered = await ctx.db
    .update(streamLeases)
    .set({ answeredAt: sql`now()` })
    .where(and(eq(streamLeases.machineId, input.machineId), eq(streamLeases.connectionId, input.connectionId)))
    .returning({ machineId: streamLeases.machineId });
  return answered.length === 1;
}

/**
 * Pings answered over uplinks, written together (group commit): the lease rows of the streams named, if those
 * connections still hold them, record an answer now.
 */
export async function writePongs(db: Db, rows: Array<{ machineId: string; connectionId: string }>): Promise<void> {
  await db.execute(sql`
    update stream_leases set answered_at = now()
    from unnest(${column(rows, (r) => r.machineId)}::text[], ${column(rows, (r) => r.connectionId)}::text[]) as p(machine_id, connection_id)
    where stream_leases.machine_id = p.machine_id and stream_leases.connection_id = p.connection_id`);
}

/** Whether the agent answered a ping on this stream within `streamPingTimeoutMs`, judged by the database's clock. */
export async function pingAnswered({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { machineId: string; connectionId: string };
}): Promise<boolean> {
  const timeout = ctx.config.streamPingTimeoutMs / 1000;
  const [row] = await ctx.db
    .select({ fresh: sql<boolean>`coalesce(${streamLeases.answeredAt}, ${streamLeases.attachedAt}) > now() - make_interval(secs => ${timeout})` })
    .from(streamLeases)
    .where(and(eq(streamLeases.machineId, input.machineId), eq(streamLeases.connectionId, input.connectionId)));
  return row?.fresh ?? false;
}

/** The machines whose stream some holder has a live lease on: where a running workload can be. */
export async function linkedMachines(db: Db): Promise<string[]> {
  const rows = await db.select({ machineId: streamLeases.machineId }).from(streamLeases).where(sql`${streamLeases.expiresAt} > now()`);
  return rows.map((row) => row.machineId);
}

/** Drops the lease if this connection still holds it. */
export async function detachStream({ ctx, input }: { ctx: ServiceCtx; input: { machineId: string; connectionId: string } }): Promise<void> {
  await ctx.db.delete(streamLeases).where(and(eq(streamLeases.machineId, input.machineId), eq(streamLeases.connectionId, input.connectionId)));
}

/** An assignment as the agent expects it: the contract's defaults filled in, members it does not know dropped. */
function asSigned(spec: Assignment): Assignment {
  return Assignment.parse(spec);
}

/** The run workers a machine holds (placed, not released), as its desired state carries them, by run and rank. */
async function machineWorkers(db: Db, machineId: string): Promise<WorkerAssignment[]> {
  const rows = await db
    .select({ worker: runWorkers, jobId: runs.jobId })
    .from(runWorkers)
    .innerJoin(runs, eq(runs.id, runWorkers.runId))
    .where(and(eq(runWorkers.machineId, machineId), isNull(runWorkers.releasedAt)))
    .orderBy(asc(runWorkers.runId), asc(runWorkers.rank));
  return rows.flatMap(({ worker: w, jobId }) =>
    w.command === null
      ? []
      : [
          WorkerAssignment.parse({
            workerId: w.id,
            runId: w.runId,
            name: w.name,
            attempt: w.attempt,
            command: w.command,
            resources: w.resources,
            phase: w.phase,
            ...(jobId ? { job: { id: jobId } } : {}),
          }),
        ],
  );
}

/**
 * Signs the machine's full desired state (docs/design.md section 4) as a compact JWS, and records its expiry so
 * that routing can require an unexpired assignment. Level-triggered: always the whole state, never a delta.
 */
export async function signDesiredState({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config' | 'identity'> & { artifacts?: ArtifactStore };
  input: { machineId: string };
}): Promise<{ jws: string; gen: number; exp: number }> {
  const identity = await ctx.identity();
  const [machine] = await ctx.db
    .select({ workspaceId: machines.workspaceId, desiredGen: machines.desiredGen, revokedAt: machines.revokedAt })
    .from(machines)
    .where(eq(machines.id, input.machineId));
  if (!machine) throw new ApiError('not_found', 'machine not found');
  if (machine.revokedAt) throw new ApiError('machine_revoked', 'the machine has been revoked');
  const rows = await ctx.db
    .select({ spec: assignments.spec })
    .from(assignments)
    .where(and(eq(assignments.machineId, input.machineId), isNull(assignments.removedAt)))
    .orderBy(asc(assignments.id));
  // Runtime secrets are decrypted into the runtimes that name them here, and only into the signed state.
  const revealed = await revealSecretEnv({ ctx, input: { workspaceId: machine.workspaceId, specs: rows.map((r) => r.spec) } });
  // Likewise the registry versions' file URLs, short-lived and never stored.
  const specs = await withArtifactUrls({ ctx, input: { workspaceId: machine.workspaceId, specs: revealed } });
  const workers = await machineWorkers(ctx.db, input.machineId);
  const [clock] = await queryRows<{ now: string | Date }>(ctx.db, sql`select now() as now`);
  const iat = Math.floor(new Date(clock!.now).getTime() / 1000);
  const exp = iat + Math.floor(ctx.config.desiredTtlMs / 1000);
  const jws = await new SignJWT({ gen: machine.desiredGen, assignments: specs.map(asSigned), workers })
    .setProtectedHeader({ alg: 'EdDSA', kid: identity.signingKey.kid, typ: 'lunanexa-desired+jwt' })
    .setIssuer(identity.clusterId)
    .setSubject(input.machineId)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(identity.signingKey.privateKey);
  // Fenced by generation: a signature of an older generation never extends the newer one's validity.
  await ctx.db
    .update(machines)
    .set({ desiredExpiresAt: sql`greatest(coalesce(${machines.desiredExpiresAt}, to_timestamp(0)), to_timestamp(${exp}))` })
    .where(and(eq(machines.id, input.machineId), eq(machines.desiredGen, machine.desiredGen)));
  return { jws, gen: machine.desiredGen, exp };
}

/** The generation of a machine's desired state now: what a stream that may have missed a signal compares with. */
export async function desiredGeneration({ ctx, input }: { ctx: ServiceCtx; input: { machineId: string } }): Promise<number | null> {
  const [current] = await ctx.db.select({ gen: machines.desiredGen }).from(machines).where(eq(machines.id, input.machineId));
  return current?.gen ?? null;
}
