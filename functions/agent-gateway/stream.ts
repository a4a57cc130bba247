import type { Hono } from 'hono';
import { eq } from 'drizzle-orm';
import { machines } from '../store/schema/index.js';
import { streamSSE } from 'hono/streaming';
import { ApiError } from '../errors.js';
import { newId } from '../../shared/ids.js';
import { STREAM_PROTOCOL_VERSION } from '../../shared/contracts/stream.js';
import { attachStream, detachStream, pingAnswered, renewStream, signDesiredState } from '../services/streams.js';
import { errorFields } from '../telemetry/error-fields.js';
import { machineAuth } from '../http/machine-auth.js';
import { serviceCtx, type AppEnv } from '../context.js';
import type { BusMessage } from '../relay/bus.js';
import type { Invoke } from '../../shared/contracts/relay.js';

const LAST_EVENT_ID = /^desired-\d{1,12}$/;

/**
 * GET /agent/v1/stream: the machine's long-lived SSE stream. Sends `hello`, then the full signed desired
 * state on connect and on every change (level-triggered), comment keep-alives that also renew the stream
 * lease, a re-signed state before the current one expires, and `revoked` before closing on revocation.
 */
export function registerStream(app: Hono<AppEnv>) {
  app.get('/stream', machineAuth, async (c) => {
    const ports = c.get('ports');
    const { machineId } = c.get('machine');
    const lastEventId = c.req.header('last-event-id');
    if (lastEventId !== undefined && !LAST_EVENT_ID.test(lastEventId)) throw new ApiError('bad_request', 'Last-Event-ID is not one this server issued');
    const ctx = serviceCtx(ports, machineId);
    const connectionId = newId('connection');
    // The lease counts only while this instance's own lease does (a no-op on Node, whose timer renews it).
    await ports.instanceLease.touch(ports.store.db);
    await attachStream({ ctx, input: { machineId, connectionId } });
    // Sign before the stream opens so that a failure is an ordinary error response.
    const first = await signDesiredState({ ctx, input: { machineId } });

    c.header('X-Accel-Buffering', 'no');
    const response = streamSSE(c, async (stream) => {
      ports.metrics.streamsAttached.inc();
      let closed = false;
      let finish!: () => void;
      const done = new Promise<void>((resolve) => (finish = resolve));
      let signedExp = first.exp;
      let writing = Promise.resolve();
      // Writes are chained so that concurrent signals never interleave SSE frames.
      const enqueue = (write: () => Promise<void>) => {
        writing = writing.then(write).catch(() => close());
        return writing;
      };
      const sendDesired = async (signed?: { jws: string; gen: number; exp: number }) => {
        const desired = signed ?? (await signDesiredState({ ctx, input: { machineId } }));
        signedExp = desired.exp;
        await stream.writeSSE({ event: 'desired', id: `desired-${desired.gen}`, data: JSON.stringify({ jws: desired.jws }) });
        ports.metrics.desiredSent.inc();
      };
      const close = () => {
        if (closed) return;
        closed = true;
        clearInterval(keepAlive);
        clearInterval(ping);
        ports.relay.pingAnswers.delete(connectionId);
        unsubscribe();
        detachRelay();
        finish();
      };
      // Relay events go straight to the socket: no other write can be in the middle of an SSE frame since
      // each writeSSE is one write, and the hot path must not wait behind keep-alive renewals.
      const sink = {
        invoke: (invoke: Invoke) => void stream.writeSSE({ event: 'invoke', data: JSON.stringify(invoke) }).catch(close),
        cancel: (invocationId: string, reason: string) => void stream.writeSSE({ event: 'cancel', data: JSON.stringify({ invocationId, reason }) }).catch(close),
      };
      const detachRelay = ports.relay.hub.attachStream(machineId, sink);
      ports.relay.routing.invalidate();
      const unsubscribe = ports.bus.subscribe(`machine:${machineId}`, (signal: BusMessage) => {
        if (signal.type === 'desired') void enqueue(() => sendDesired());
        else if (signal.type === 'invoke') void ports.relay.hub.pickup(machineId, signal.invocationId).catch(() => {});
        else if (signal.type === 'cancel') sink.cancel(signal.invocationId, signal.reason);
        else if (signal.type === 'logs') {
          const { requestId, assignmentId, lines } = signal;
          void enqueue(() => stream.writeSSE({ event: 'logs', data: JSON.stringify({ requestId, assignmentId, lines }) }));
        }
        else if (signal.type === 'revoked') {
          void enqueue(async () => {
            await stream.writeSSE({ event: 'revoked', data: JSON.stringify({ reason: signal.reason }) });
            close();
          });
        }
      });
      const keepAlive = setInterval(() => {
        void enqueue(async () => {
          await ports.instanceLease.touch(ports.store.db);
          if (!(await renewStream({ ctx, input: { machineId, connectionId } }))) return close();
          if (signedExp * 1000 - Date.now() < ports.config.desiredTtlMs / 3) await sendDesired();
          await stream.write(': keep-alive\n\n');
        });
      }, ports.config.streamKeepAliveMs);
      // Written straight to the socket like relay events: a ping queued behind a slow renewal would prove nothing.
      // An agent that stops answering (frozen) loses its stream: the invocations sent through it fail at once and
      // are retried elsewhere before their first byte, instead of waiting for the node to thaw.
      let pingSeq = 0;
      let checking = false;
      ports.relay.pingAnswers.set(connectionId, Date.now());
      const ping = setInterval(() => {
        void stream.writeSSE({ event: 'ping', data: `{"seq":${++pingSeq}}` }).catch(close);
        const heardAt = ports.relay.pingAnswers.get(connectionId) ?? 0;
        if (checking || Date.now() - heardAt <= ports.config.streamPingTimeoutMs) return;
        // Not heard here: the answer may have reached another instance, which wrote it to the lease.
        checking = true;
        void pingAnswered({ ctx, input: { machineId, connectionId } })
          .then((fresh) => {
            if (fresh) ports.relay.pingAnswers.set(connectionId, Date.now());
            else {
              ports.logger.warn({ machineId }, 'the agent stopped answering pings: closing its stream');
              close();
            }
          })
          .catch((error: unknown) => ports.logger.warn({ err: errorFields(error), machineId }, 'checking ping answers failed'))
          .finally(() => (checking = false));
      }, ports.config.streamPingMs);
      stream.onAbort(close);

      await enqueue(async () => {
        await stream.writeSSE({
          event: 'hello',
          data: JSON.stringify({ protocol: STREAM_PROTOCOL_VERSION, machineId, connectionId, keepAliveMs: ports.config.streamKeepAliveMs }),
        });
        await sendDesired(first);
      });
      // A change committed between signing `first` and subscribing above signalled nobody: catch up once.
      void enqueue(async () => {
        const [current] = await ports.store.db.select({ gen: machines.desiredGen }).from(machines).where(eq(machines.id, machineId));
        if (current && current.gen !== first.gen) await sendDesired();
      });
      await done;
      ports.metrics.streamsAttached.dec();
      await detachStream({ ctx, input: { machineId, connectionId } }).catch(() => {});
      // The lease is gone: stop routing to this node now rather than at the next refresh.
      ports.relay.routing.invalidate();
    });
    // streamSSE sets its own `Cache-Control: no-cache`; proxies must not transform the stream either.
    response.headers.set('Cache-Control', 'no-cache, no-transform');
    return response;
  });
}
