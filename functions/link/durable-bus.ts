import type { Bus, BusMessage } from '../kernel/ports/bus.js';
import { createSubscriberRegistry } from '../kernel/memory-bus.js';
import { MACHINE_HEADER } from './forwarded.js';
import { LINK_ORIGIN, linkStub, type DurableHolders, type LinkNamespace } from './durable-holders.js';

/** How long one wait for a channel's message lasts inside the object before it is asked again. */
const CHANNEL_WAIT_MS = 20_000;

type Target = { kind: 'signal' | 'channel'; machineId: string } | { kind: 'workload'; workloadId: string };

/** Where a channel lives on Workers: the object of the machine it names, or (a workload's) wherever it runs. */
function targetOf(channel: string): Target | null {
  const [prefix, id] = channel.split(':');
  if (!id) return null;
  if (prefix === 'machine') return { kind: 'signal', machineId: id };
  if (prefix === 'logs') return { kind: 'channel', machineId: id };
  if (prefix === 'workload') return { kind: 'workload', workloadId: id };
  return null;
}

/**
 * The relay bus on Workers (docs/workers.md). No process outlives a request, so a signal to a machine
 * (`machine:<id>`: desired state, revocation, log request) is a request to the machine's Durable Object, which
 * holds its stream; a log answer (`logs:<machine>:…`) meets the request waiting for it in that same object; a
 * workload's cancel (`workload:<id>`) goes to this isolate's subscribers and to every object holding a link
 * (`linkedMachines`), since the machine running it is recorded only when it finishes: the object running it tells
 * its request, which cancels it as a cancel on its own instance would.
 */
export function createEdgeBus(namespace: LinkNamespace, links: DurableHolders, linkedMachines: () => Promise<string[]>): Bus {
  const local = createSubscriberRegistry();
  return {
    async publish(channel, message) {
      const target = targetOf(channel);
      if (!target) return local.deliver(channel, message);
      if (target.kind === 'workload') {
        local.deliver(channel, message);
        return await links.cancelWorkload(await linkedMachines(), target.workloadId);
      }
      const path = target.kind === 'signal' ? '/link/v1/signal' : `/link/v1/channel?channel=${encodeURIComponent(channel)}`;
      await links.post(target.machineId, path, message);
    },
    subscribe(channel, handler) {
      const target = targetOf(channel);
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
