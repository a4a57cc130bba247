import { LogUploadAccepted, PingAnswered } from '../../shared/contracts/stream.js';
import type { SignedClient } from './http.js';

type Log = (event: string, fields?: Record<string, unknown>) => void;

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Answers a `ping` of the stream `connection` (its `hello` named it) on its own request, when no uplink carries it. */
export function answerPing(client: Pick<SignedClient, 'request'>, log: Log, connection: string, seq: number): void {
  void client
    .request('POST', '/agent/v1/pong', { connectionId: connection, seq }, PingAnswered)
    .then((result) => {
      if (!result.success) log('ping answer refused', { code: result.error.code });
    })
    .catch((error: unknown) => log('ping answer failed', { error: message(error) }));
}

/** Answers a `logs` event: the tail of a runtime's log, sent to the request that asked for it. */
export function uploadLogs(client: Pick<SignedClient, 'request'>, log: Log, assignmentId: string, requestId: string, lines: Promise<string[]>): void {
  void (async () => {
    const path = `/agent/v1/runtimes/${encodeURIComponent(assignmentId)}/logs`;
    const result = await client.request('POST', path, { requestId, lines: await lines }, LogUploadAccepted);
    if (!result.success) log('log upload rejected', { code: result.error.code });
  })().catch((error: unknown) => log('log upload failed', { error: message(error) }));
}
