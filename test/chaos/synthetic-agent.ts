import type { Dispatcher } from 'undici';
import { createSignedClient, type MachineCredentials } from '../../agent/link/http.js';
import { afterReportFailure, firstReportDelayMs, keepAliveDelayMs, retryDelayMs } from '../../agent/reporter/schedule.js';
import { openStreamLink } from '../../agent/link/stream.js';
import { createUplink } from '../../agent/link/uplink.js';
import { UPLINK_CONFIRM_MS, UPLINK_MAX_AGE_MS } from '../../agent/agent.js';
import { HeartbeatResponse } from '../../shared/contracts/heartbeat.js';
import { PingAnswered } from '../../shared/contracts/stream.js';

/** What a fleet of synthetic agents saw, summed over its agents. */
export class SyntheticStats {
  heartbeatLatenciesMs: number[] = [];
  heartbeatFailures = 0;
  firstHeartbeatFailures = 0;
  firstHeartbeatLatenciesMs: number[] = [];
  /** Why heartbeats failed: "0 network_error: This operation was aborted" (a 10 s timeout), "503 store_unavailable". */
  failureReasons = new Map<string, number>();
  streamOpens = 0;
  pings = 0;
  /** Pings answered on the uplink, as agents answer while theirs is confirmed. */
  uplinkPongs = 0;
  /** Pings answered with `POST /agent/v1/pong` (no confirmed uplink), and how many of those failed. */
  pongs = 0;
  pongFailures = 0;
}

/** Same spacing of reports on a change as the agent's (agent/reporter/reporter.ts). */
const REPORT_SPACING_MS = 250;

/**
 * A machine without runtimes that speaks the agent's protocol with the agent's own link code: the signed client
 * (10 s timeout per request), the SSE stream link (backoff, silence watchdog), the keep-alive schedule with its
 * jitter, retries of failed reports, a report on every desired state, the uplink, and an answer to every ping (on
 * the uplink while it is confirmed, as the agent answers, else by a signed request). Many run in one
 * process, so that a fleet of a thousand costs no thousand processes; the control plane cannot tell them from
 * agents. Desired states are taken as sent (nothing to run, nothing to verify for).
 */
export function runSyntheticAgent(opts: { url: string; machine: MachineCredentials; intervalMs: number; dispatcher: Dispatcher; stats: SyntheticStats }) {
  const { machine, stats } = opts;
  const client = createSignedClient({ baseUrl: opts.url, credentials: () => machine, dispatcher: opts.dispatcher });
  const bootId = crypto.randomUUID();
  let seq = 0;
  let heldGen = 0;
  let intervalMs = opts.intervalMs;
  let failures = 0;
  let nextKeepAliveAt = 0;
  let lastReportAt = 0;
  let reporting = false;
  let stopped = false;
  let connectionId: string | null = null;
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, fn: () => void) => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (!stopped) fn();
    }, ms);
    timers.add(timer);
  };

  const report = async () => {
    if (reporting || stopped) return;
    reporting = true;
    lastReportAt = Date.now();
    const first = seq === 0;
    const started = performance.now();
    const body = { machineId: machine.machineId, bootId, seq: ++seq, status: 'ready', gen: heldGen, runtimes: [], warmModels: [], metrics: {} };
    const result = await client.request('POST', '/agent/v1/heartbeat', body, HeartbeatResponse);
    const ms = performance.now() - started;
    reporting = false;
    if (result.success) {
      intervalMs = result.data.heartbeatIntervalMs;
      failures = 0;
      stats.heartbeatLatenciesMs.push(ms);
      if (first) stats.firstHeartbeatLatenciesMs.push(ms);
      return;
    }
    stats.heartbeatFailures += 1;
    if (first) stats.firstHeartbeatFailures += 1;
    const reason = `${result.status} ${result.error.code}${result.status === 0 ? `: ${result.error.message}` : ''}`;
    stats.failureReasons.set(reason, (stats.failureReasons.get(reason) ?? 0) + 1);
    failures += 1;
    if (afterReportFailure({ status: result.status, code: result.error.code }) === 'drop') return;
    const delay = retryDelayMs(failures, nextKeepAliveAt - performance.now(), intervalMs);
    if (delay !== null) later(delay, () => void report());
  };

  let soon = false;
  const reportSoon = () => {
    if (soon) return;
    soon = true;
    later(Math.max(0, lastReportAt + REPORT_SPACING_MS - Date.now()), () => {
      soon = false;
      void report();
    });
  };

  const keepAlive = () => {
    nextKeepAliveAt = performance.now() + keepAliveDelayMs(intervalMs);
    void report();
    later(nextKeepAliveAt - performance.now(), keepAlive);
  };

  const uplink = createUplink({
    baseUrl: opts.url,
    dispatcher: opts.dispatcher,
    signedHeaders: client.signedHeaders,
    confirmMs: UPLINK_CONFIRM_MS,
    maxAgeMs: UPLINK_MAX_AGE_MS,
    log: () => {},
  });
  const link = openStreamLink({
    baseUrl: opts.url,
    dispatcher: opts.dispatcher,
    signedHeaders: client.signedHeaders,
    silenceTimeoutMs: 45_000,
    onState: (state) => {
      if (state === 'open') stats.streamOpens += 1;
      else {
        connectionId = null;
        uplink.stop();
      }
    },
    onMalformed: () => {},
    onFatal: () => {},
    onEvent: (event) => {
      if (event.event === 'hello') {
        connectionId = event.data.connectionId;
        uplink.start();
      } else if (event.event === 'uplink') uplink.confirmed(event.data.uplinkId);
      else if (event.event === 'ack') uplink.acknowledged(event.data.offsets);
      else if (event.event === 'ping' && connectionId) {
        stats.pings += 1;
        if (uplink.pong(event.data.seq)) {
          stats.uplinkPongs += 1;
          return;
        }
        void client.request('POST', '/agent/v1/pong', { connectionId, seq: event.data.seq }, PingAnswered).then((r) => {
          if (r.success) stats.pongs += 1;
          else stats.pongFailures += 1;
        });
      } else if (event.event === 'desired') {
        const { gen } = JSON.parse(Buffer.from(event.data.jws.split('.')[1] ?? '', 'base64url').toString()) as { gen: number };
        if (gen >= heldGen) {
          heldGen = gen;
          reportSoon();
        }
      }
    },
  });
  later(firstReportDelayMs(intervalMs), keepAlive);
  return {
    stop() {
      stopped = true;
      for (const timer of timers) clearTimeout(timer);
      uplink.stop();
      link.close();
    },
  };
}
