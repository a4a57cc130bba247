import { createSubscriberRegistry, type Bus, type BusMessage } from '../relay/bus.js';
import { MACHINE_HEADER } from '../relay/forwarded.js';
import { LINK_ORIGIN, linkStub, type LinkNamespace } from './links.js';

/** How long one wait for a channel's message lasts inside the object before it is asked again. */
const CHANNEL_WAIT_MS = 20_000;

/** Where a channel lives on Workers: the object of the machine it names, or (workload channels) this isolate. */
function linkChannel(channel: string): { kind: 'signal' | 'channel'; machineId: string } | null {
  const [prefix, machineId] = channel.split(':');
  if (!machineId) return null;
  if (prefix === 'machine') return { kind: 'signal', machineId };
  if (prefix === 'logs') return { kind: 'channel', machineId };
  return null;
}

/**
 * The relay bus on Workers (docs/workers.md). There is no process that outlives a request, so a signal to a
 * machine (`machine:<id>`: desired state, revocation, log request) is a request to the machine's Durable Object,
 * which holds its stream; a log answer (`logs:<machine>:…`) meets the request waiting for it in that same object.
 * `workload:<id>` cancels stay within the isolate: a workload running in another isolate is cancelled when its
 * client goes away or its deadline passes, not by the cancel API (a documented limit).
 */
export function createEdgeBus(namespace: LinkNamespace): Bus {
  const local = createSubscriberRegistry();
  return {
    async publish(channel, message) {
      const target = linkChannel(channel);
      if (!target) return local.deliver(channel, message);
      const path = target.kind === 'signal' ? '/link/v1/signal' : `/link/v1/channel?channel=${encodeURIComponent(channel)}`;
      const response = await linkStub(namespace, target.machineId).fetch(`${LINK_ORIGIN}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', [MACHINE_HEADER]: target.machineId },
        body: JSON.stringify(message),
      });
      await response.body?.cancel();
      if (!response.ok) throw new Error(`the machine's link refused the signal (HTTP ${response.status})`);
    },
    subscribe(channel, handler) {
      const target = linkChannel(channel);
      if (target?.kind !== 'channel') return local.subscribe(channel, handler);
      const stop = new AbortController();
      const url = `${LINK_ORIGIN}/link/v1/channel?channel=${encodeURIComponent(channel)}&waitMs=${CHANNEL_WAIT_MS}`;
      void (async () => {
        while (!stop.signal.aborted) {
          const response = await linkStub(namespace, target.machineId).fetch(url, { headers: { [MACHINE_HEADER]: target.machineId }, signal: stop.signal });
          if (response.status === 200) handler((await response.json()) as BusMessage);
          else await response.body?.cancel();
          if (response.status !== 200 && response.status !== 204) return;
        }
      })().catch(() => {
        // Unsubscribed (aborted) or the object is unreachable: the waiting request times out on its own.
      });
      return () => stop.abort();
    },
    localChannels: local.channels,
    deliverLocal: local.deliver,
    async close() {
      local.clear();
    },
  };
}
