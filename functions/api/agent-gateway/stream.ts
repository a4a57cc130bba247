import type { Hono, MiddlewareHandler } from 'hono';
import { ApiError } from '../../kernel/errors.js';
import { newId } from '../../../shared/ids.js';
import { STREAM_PROTOCOL_VERSION } from '../../../shared/contracts/stream.js';
import { attachStream, desiredGeneration, detachStream, pingAnswered, renewStream, signDesiredState } from '../../services/streams.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import { machineAuth } from '../http/machine-auth.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import type { BusMessage } from '../../kernel/ports/bus.js';
import { holdLocalStream } from '../../link/local-stream.js';
import { openSse } from '../http/sse-out.js';

const LAST_EVENT_ID = /^desired-\d{1,12}$/;

/**
 * GET /agent/v1/stream: the machine's long-lived SSE stream. Sends `hello`, then the full signed desired
 * state on connect and on every change (level-triggered), comment keep-alives that also renew the stream
 * lease, a re-signed state before the current one expires, and `revoked` before closing on revocation. The
 * relay's events ride it too (`invoke`, `cancel`, uplink `ack`s and confirmation, `ping`), written straight to
 * the response and coalesced per event-loop turn.
 */
export function registerStream(app: Hono<AppEnv>, auth: MiddlewareHandler<AppEnv> = machineAuth) {
  app.get('/stream', auth, async (c) => {
    const ports = c.get('ports');
    const { machineId } = c.get('machine');
    const lastEventId = c.req.header('last-event-id');
    if (lastEventId !== undefined && !LAST_EVENT_ID.test(lastEventId)) throw new ApiError('bad_request', 'Last-Event-ID is not one this server issued');
    // Workers: the machine's Durable Object holds its stream; this request only authenticated it.
    const held = ports.dataPlane.holder.holdStream(c.get('machine'), c.req.raw);
    if (held) return await held;
    // The artifact store signs the URLs of the versions the machine's assignments fetch.
    const ctx = { ...serviceCtx(ports, machineId), artifacts: ports.artifacts };
    const connectionId = newId('connection');
    // The lease counts only while this instance's own lease does (a no-op on Node, whose timer renews it).
    await ports.instanceLease.touch(ports.store.db);
    await attachStream({ ctx, input: { machineId, connectionId } });
    // Sign before the stream opens so that a failure is an ordinary error response.
    const first = await signDesiredState({ ctx, input: { machineId } });

    ports.metrics.streamsAttached.inc();
    let closed = false;
    let signedExp = first.exp;
    let tasks = Promise.resolve();
    // Tasks that read the store before writing (signing, renewing) run one at a time, in order: a desired state
    // signed later is never written before one signed earlier.
    const enqueue = (task: () => Promise<void>) => {
      tasks = tasks.then(task).catch((error: unknown) => {
        // A desired state that cannot be signed (or a lease that cannot be renewed) closes the stream: the agent reconnects.
        ports.metrics.backgroundErrors.inc({ task: 'stream-task' });
        ports.logger.warn({ err: errorFields(error), machineId }, 'agent stream task failed; closing the stream');
        close();
      });
      return tasks;
    };
    const sendDesired = async (signed?: { jws: string; gen: number; exp: number }) => {
      const desired = signed ?? (await signDesiredState({ ctx, input: { machineId } }));
      signedExp = desired.exp;
      out.event('desired', JSON.stringify({ jws: desired.jws }), `desired-${desired.gen}`);
      ports.metrics.desiredSent.inc();
    };
    const close = () => {
      if (closed) return;
      closed = true;
      clearInterval(keepAlive);
      link.release();
      unsubscribe();
      out.close();
      ports.metrics.streamsAttached.dec();
      void detachStream({ ctx, input: { machineId, connectionId } })
        .catch((error: unknown) => {
          // The lease row stays until it lapses (streamLeaseTtlMs): routing may still pick this machine until then.
          ports.metrics.backgroundErrors.inc({ task: 'stream-detach' });
          ports.logger.warn({ err: errorFields(error), machineId }, 'dropping the stream lease failed; it lapses at its TTL');
        })
        // The lease is gone: stop routing to this node now rather than at the next refresh.
        .finally(() => ports.dataPlane.routing.invalidate());
    };
    const out = openSse(c, {}, close);
    const link = holdLocalStream({
      holder: ports.dataPlane.holder,
      pings: ports.dataPlane.pings,
      machineId,
      connectionId,
      out,
      timing: { pingMs: ports.config.streamPingMs, pingTimeoutMs: ports.config.streamPingTimeoutMs },
      answeredElsewhere: () => pingAnswered({ ctx, input: { machineId, connectionId } }),
      silent: () => {
        ports.logger.warn({ machineId }, 'the agent stopped answering pings: closing its stream');
        close();
      },
      checkFailed: (error) => ports.logger.warn({ err: errorFields(error), machineId }, 'checking ping answers failed'),
    });
    ports.dataPlane.routing.invalidate();
    const unsubscribe = ports.bus.subscribe(`machine:${machineId}`, (signal: BusMessage) => {
      if (signal.type === 'desired') void enqueue(() => sendDesired());
      else if (signal.type === 'logs') {
        const { requestId, assignmentId, lines } = signal;
        out.event('logs', JSON.stringify({ requestId, assignmentId, lines }));
      } else if (signal.type === 'revoked') {
        void enqueue(async () => {
          out.event('revoked', JSON.stringify({ reason: signal.reason }));
          close();
        });
      }
    });
    const keepAlive = setInterval(() => {
      void enqueue(async () => {
        await ports.instanceLease.touch(ports.store.db);
        if (!(await renewStream({ ctx, input: { machineId, connectionId } }))) return close();
        if (signedExp * 1000 - Date.now() < ports.config.desiredTtlMs / 3) await sendDesired();
        out.comment('keep-alive');
      });
    }, ports.config.streamKeepAliveMs);

    out.event('hello', JSON.stringify({ protocol: STREAM_PROTOCOL_VERSION, machineId, connectionId, keepAliveMs: ports.config.streamKeepAliveMs }));
    void enqueue(() => sendDesired(first));
    // A change committed between signing `first` and subscribing above signalled nobody: catch up once.
    void enqueue(async () => {
      const gen = await desiredGeneration({ ctx, input: { machineId } });
      if (gen !== null && gen !== first.gen) await sendDesired();
    });
    return out.response;
  });
}
