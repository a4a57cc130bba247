import type { StreamEvent } from '../shared/contracts/stream.js';
import type { ServerClock } from './link/clock.js';
import type { SignedClient } from './link/http.js';
import { answerPing, uploadLogs } from './link/replies.js';
import type { StreamLinkOptions } from './link/stream.js';
import type { Uplink } from './link/uplink.js';
import type { InvocationRunner } from './invocations/runner.js';
import type { Log } from './log.js';
import type { Supervisor } from './supervisor/supervisor.js';
import type { WorkerSupervisor } from './workers/supervisor.js';

/** The counters of the link that the heartbeats carry. */
interface LinkCounters {
  stream_malformed_total: number;
  stream_connects_total: number;
}

export interface StreamEventsOptions {
  client: Pick<SignedClient, 'request'>;
  clock: Pick<ServerClock, 'resync' | 'toLocal'>;
  uplink: Uplink;
  /** `off` sends every answer on an upload of its own (the fallback), never up the uplink. */
  uplinkMode: 'auto' | 'off';
  invocations: InvocationRunner;
  desired: { offer(jws: string): void };
  supervisor: Pick<Supervisor, 'logs'>;
  workers: Pick<WorkerSupervisor, 'has' | 'logs'>;
  /** Shutting down: no new desired state is taken. */
  stopping: () => boolean;
  onRevoked: () => void;
  counters: LinkCounters;
  log: Log;
}

/** What the agent does with each thing its stream link reports: the link's callbacks, wired to the other parts. */
export function createStreamEvents(opts: StreamEventsOptions): Pick<StreamLinkOptions, 'onEvent' | 'onState' | 'onMalformed' | 'onFatal'> {
  const { client, clock, uplink, invocations, log } = opts;
  /** The stream connection the control plane named in `hello`; pings are answered for it. */
  let connectionId: string | null = null;

  function onEvent(event: StreamEvent): void {
    switch (event.event) {
      case 'hello':
        connectionId = event.data.connectionId;
        if (opts.uplinkMode !== 'off') uplink.start();
        return;
      case 'ping':
        if (connectionId && !uplink.pong(event.data.seq)) answerPing(client, log, connectionId, event.data.seq);
        return;
      case 'uplink':
        return uplink.confirmed(event.data.uplinkId);
      case 'ack':
        return uplink.acknowledged(event.data.offsets);
      case 'credit':
        return invocations.credit(event.data.credits);
      case 'desired':
        // A stopping agent takes no new state: its runtimes are draining or being left for the next one.
        if (!opts.stopping()) opts.desired.offer(event.data.jws);
        return;
      case 'invoke':
        // The deadline is the control plane's time; the runner's timers and the runtime's header are this machine's.
        return invocations.run({ ...event.data, deadline: clock.toLocal(event.data.deadline) });
      case 'cancel':
        return invocations.cancel(event.data.invocationId, event.data.reason);
      case 'logs': {
        // The id names a runtime's assignment (asg_...) or a run's worker (wrk_...): the two never collide.
        const { assignmentId: id, lines } = event.data;
        const tail = opts.workers.has(id) ? opts.workers.logs(id, lines) : opts.supervisor.logs(id, lines);
        return uploadLogs(client, log, id, event.data.requestId, tail);
      }
      case 'revoked':
        log('machine revoked', { reason: event.data.reason });
        return opts.onRevoked();
    }
  }

  return {
    onEvent,
    onState: (state, detail) => {
      if (state === 'open') opts.counters.stream_connects_total += 1;
      else {
        connectionId = null;
        // The instance that sent these invocations dropped them with the stream (its requests failed or were
        // retried elsewhere): running them on would serve nobody and hold the runtime. The uplink was bound to it.
        if (state === 'closed') {
          uplink.stop();
          invocations.abortAll('stream_lost');
        }
      }
      log(`stream ${state}`, detail ? { detail } : {});
    },
    onMalformed: (error) => {
      opts.counters.stream_malformed_total += 1;
      log('stream message rejected', { error });
    },
    onFatal: (status) => {
      log('stream refused', { status });
      // Possibly for clock skew (the reason is in the body the link does not read): measuring costs little.
      if (status === 401) void clock.resync('the control plane refused the stream');
    },
  };
}
