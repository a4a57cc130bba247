import { and, eq, isNull } from 'drizzle-orm';
import { assignments, machines, runs, runWorkers } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import type { ServiceCtx, ServicePorts } from './service-context.js';

/** How long the node has to answer a log request. */
const LOGS_TIMEOUT_MS = 5_000;

/**
 * Where an answer to a log request travels: bound to the machine asked and the runtime asked about as well as the
 * request id. The upload handler publishes under the machine that authenticated and the assignment of the URL (which
 * it checked is that machine's), so an answer from any other machine, or about another runtime, reaches nobody.
 */
function logAnswerChannel(machineId: string, assignmentId: string, requestId: string): string {
  return `logs:${machineId}:${assignmentId}:${requestId}`;
}

/**
 * Asks a node for the tail of the log ring of `id` (a runtime's assignment or a run's worker: the agent keeps both)
 * over the machine's own stream (`logs` event) and waits for the agent's upload. Nodes have no inbound port, so this
 * is the only way in.
 */
async function askForLogs(ctx: ServiceCtx & Pick<ServicePorts, 'bus'>, machineId: string, id: string, lines: number): Promise<string[]> {
  const requestId = crypto.randomUUID();
  return await new Promise<string[]>((resolve, reject) => {
    const timer = setTimeout(() => {
      unsubscribe();
      reject(new ApiError('unavailable', 'the machine did not answer in time; is its stream attached?'));
    }, LOGS_TIMEOUT_MS);
    const unsubscribe = ctx.bus.subscribe(logAnswerChannel(machineId, id, requestId), (message) => {
      if (message.type !== 'log-lines') return;
      clearTimeout(timer);
      unsubscribe();
      resolve(message.lines);
    });
    // A signal that never left (the store is away) fails the request now, not at the timeout.
    ctx.bus.publish(`machine:${machineId}`, { type: 'logs', requestId, assignmentId: id, lines }).catch((error: unknown) => {
      clearTimeout(timer);
      unsubscribe();
      reject(error);
    });
  });
}

/** The tail of a runtime's log ring, from its node. */
export async function fetchRuntimeLogs({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { workspaceId: string; machineId: string; assignmentId: string; lines: number };
}): Promise<string[]> {
  const [row] = await ctx.db
    .select({ revokedAt: machines.revokedAt })
    .from(assignments)
    .innerJoin(machines, eq(machines.id, assignments.machineId))
    .where(
      and(eq(assignments.id, input.assignmentId), eq(machines.id, input.machineId), eq(machines.workspaceId, input.workspaceId), isNull(assignments.removedAt)),
    );
  if (!row) throw new ApiError('not_found', `runtime ${input.assignmentId} not found on machine ${input.machineId}`);
  if (row.revokedAt) throw new ApiError('conflict', 'the machine is revoked');
  return await askForLogs(ctx, input.machineId, input.assignmentId, input.lines);
}

/**
 * The tail of the log of a run's worker (by rank), from the node it is placed on, or ran on last once released
 * (completed, failed with its run, cancelled): its agent keeps the logs of its most recent finished workers
 * (LUNANEXA_AGENT_KEPT_WORKER_LOGS). A node that no longer has a released worker's log answers with no lines, as for
 * a runtime it does not know: that is 404, not an empty log. A worker not placed (waiting, or sent back to the
 * queue) is 409.
 */
export async function fetchWorkerLogs({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { workspaceId: string; runId: string; rank: number; lines: number };
}): Promise<{ workerId: string; machineId: string; lines: string[] }> {
  const [row] = await ctx.db
    .select({ id: runWorkers.id, name: runWorkers.name, machineId: runWorkers.machineId, releasedAt: runWorkers.releasedAt, revokedAt: machines.revokedAt })
    .from(runWorkers)
    .innerJoin(runs, eq(runs.id, runWorkers.runId))
    .leftJoin(machines, eq(machines.id, runWorkers.machineId))
    .where(and(eq(runs.id, input.runId), eq(runs.workspaceId, input.workspaceId), eq(runWorkers.rank, input.rank)));
  if (!row) throw new ApiError('not_found', `run ${input.runId} has no worker of rank ${input.rank}`);
  if (!row.machineId) throw new ApiError('conflict', `worker ${row.name} is not placed on a machine`);
  if (row.revokedAt) throw new ApiError('conflict', 'the machine is revoked');
  const lines = await askForLogs(ctx, row.machineId, row.id, input.lines);
  if (row.releasedAt && lines.length === 0) {
    throw new ApiError('not_found', `worker ${row.name} was released and its machine no longer keeps its log (or it printed nothing)`);
  }
  return { workerId: row.id, machineId: row.machineId, lines };
}

/**
 * A machine's answer to a log request: lines of one of its own runtimes or of a worker placed on it, handed to the
 * request waiting for them (`logAnswerChannel`). Another machine's is refused, so a machine cannot answer for another.
 */
export async function answerLogRequest({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { machineId: string; assignmentId: string; requestId: string; lines: string[] };
}): Promise<void> {
  const [owned] = await ctx.db
    .select({ id: assignments.id })
    .from(assignments)
    .where(and(eq(assignments.id, input.assignmentId), eq(assignments.machineId, input.machineId)))
    .union(
      ctx.db
        .select({ id: runWorkers.id })
        .from(runWorkers)
        .where(and(eq(runWorkers.id, input.assignmentId), eq(runWorkers.machineId, input.machineId))),
    );
  if (!owned) throw new ApiError('forbidden_machine', 'a machine may upload logs only of its own runtimes and workers');
  await ctx.bus.publish(logAnswerChannel(input.machineId, input.assignmentId, input.requestId), { type: 'log-lines', lines: input.lines });
}
