import { and, eq, isNull } from 'drizzle-orm';
import { assignments, machines } from '../store/schema/index.js';
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
 * Fetches the tail of a runtime's log ring from its node: asks over the machine's own stream (`logs`
 * event) and waits for the agent's upload. Nodes have no inbound port, so this is the only way in.
 */
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
  const requestId = crypto.randomUUID();
  return await new Promise<string[]>((resolve, reject) => {
    const timer = setTimeout(() => {
      unsubscribe();
      reject(new ApiError('unavailable', 'the machine did not answer in time; is its stream attached?'));
    }, LOGS_TIMEOUT_MS);
    const unsubscribe = ctx.bus.subscribe(logAnswerChannel(input.machineId, input.assignmentId, requestId), (message) => {
      if (message.type !== 'log-lines') return;
      clearTimeout(timer);
      unsubscribe();
      resolve(message.lines);
    });
    // A signal that never left (the store is away) fails the request now, not at the timeout.
    ctx.bus.publish(`machine:${input.machineId}`, { type: 'logs', requestId, assignmentId: input.assignmentId, lines: input.lines }).catch((error: unknown) => {
      clearTimeout(timer);
      unsubscribe();
      reject(error);
    });
  });
}

/**
 * A machine's answer to a log request: lines of one of its own runtimes, handed to the request waiting for them
 * (`logAnswerChannel`). A runtime of another machine is refused, so a machine cannot answer for another's.
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
    .where(and(eq(assignments.id, input.assignmentId), eq(assignments.machineId, input.machineId)));
  if (!owned) throw new ApiError('forbidden_machine', 'a machine may upload logs only of its own runtimes');
  await ctx.bus.publish(logAnswerChannel(input.machineId, input.assignmentId, input.requestId), { type: 'log-lines', lines: input.lines });
}
