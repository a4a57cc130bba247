/** How long an open link may take to deliver a generation the control plane announced in a heartbeat reply. */
const REFETCH_GRACE_MS = 2_000;

export interface CatchUpOptions {
  /** The generation this agent holds. */
  heldGen: () => number;
  /** A desired state is being verified: its generation is not held yet, and may be refused. */
  busy: () => boolean;
  stopping: () => boolean;
  link: { isOpen(): boolean; refetch(reason: string): void };
}

/**
 * The control plane holds a newer generation than this agent: its `desired` event was lost, or the link waits
 * in a backoff. A link in a backoff reconnects at once. An open one gets a moment first, because the heartbeat
 * reply can beat the event on its way, and a reconnect fails the in-flight invocations of this machine on the
 * control plane. Refetched once per generation, and not while one is being verified: a state this agent refuses
 * must not have it reconnect on every heartbeat.
 */
export function createCatchUp(opts: CatchUpOptions) {
  /** The newest generation the control plane announced in a heartbeat reply that made the link refetch. */
  let refetchedGen = 0;
  let timer: NodeJS.Timeout | undefined;
  return {
    announced(gen: number): void {
      const behind = () => gen > opts.heldGen() && gen > refetchedGen && !opts.busy() && !opts.stopping();
      const refetch = () => {
        refetchedGen = gen;
        opts.link.refetch(`the control plane holds generation ${gen}, this agent ${opts.heldGen()}`);
      };
      if (!behind()) return;
      if (!opts.link.isOpen()) return refetch();
      if (timer) return;
      timer = setTimeout(() => {
        timer = undefined;
        if (behind()) refetch();
      }, REFETCH_GRACE_MS);
    },
    close(): void {
      clearTimeout(timer);
    },
  };
}
