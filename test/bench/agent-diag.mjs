// Loaded into the benchmark's agent (NODE_OPTIONS=--import): the agent answers a failed runtime call with
// `runtime_unreachable` and drops the cause, so this logs every failed HTTP request of the agent with its error,
// with how long its connection had been idle before it (a connection reused just as the server closes it fails like
// this), how long before the failure it was sent, and whether the server had answered by then (an invocation the
// control plane gave up on is aborted here: when was its runtime call sent, and had the runtime answered?).
// Channels cost nothing without subscribers; these cost a WeakMap write or two per request.
import { subscribe } from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';

const idleSince = new WeakMap();
const usedBefore = new WeakMap();
const sentOn = new WeakMap();

subscribe('undici:client:sendHeaders', ({ request, socket }) => {
  const since = idleSince.get(socket);
  sentOn.set(request, {
    socket,
    at: performance.now(),
    answeredAt: null,
    reused: usedBefore.get(socket) ?? 0,
    idleMs: since === undefined ? null : performance.now() - since,
  });
});
subscribe('undici:request:headers', ({ request }) => {
  const sent = sentOn.get(request);
  if (sent) sent.answeredAt = performance.now();
});
subscribe('undici:request:trailers', ({ request }) => {
  const sent = sentOn.get(request);
  if (!sent) return;
  idleSince.set(sent.socket, performance.now());
  usedBefore.set(sent.socket, sent.reused + 1);
});
subscribe('undici:request:error', ({ request, error }) => {
  const sent = sentOn.get(request);
  process.stderr.write(
    `${JSON.stringify({
      time: new Date().toISOString(),
      msg: 'bench: agent request failed',
      method: request.method,
      origin: String(request.origin),
      path: request.path,
      error: error?.code ?? error?.name,
      message: error?.message,
      connection: sent ? { earlierRequests: sent.reused, idleMs: sent.idleMs === null ? null : Math.round(sent.idleMs) } : 'not sent',
      sentMsAgo: sent ? Math.round(performance.now() - sent.at) : null,
      answeredAfterMs: sent?.answeredAt ? Math.round(sent.answeredAt - sent.at) : null,
    })}\n`,
  );
});
