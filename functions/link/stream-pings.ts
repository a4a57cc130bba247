import type { WriteBehind } from '../store/write-behind.js';

/**
 * When the agent of each stream held by this instance last answered a ping, by connection. An answer that arrives
 * over the uplink is also recorded on the stream's lease (written behind), for the instances that hold no stream.
 */
export class StreamPings {
  private readonly heardAt = new Map<string, number>();

  constructor(private readonly recorded: WriteBehind<{ machineId: string; connectionId: string }>) {}

  /** A stream starts out heard: its first ping has a whole timeout to be answered. */
  start(connectionId: string): void {
    this.heardAt.set(connectionId, Date.now());
  }

  /** An answer over the stream's uplink: heard here, and recorded on the lease for the others. */
  answeredOverUplink(machineId: string, connectionId: string): void {
    this.heardAt.set(connectionId, Date.now());
    this.recorded.put(connectionId, { machineId, connectionId });
  }

  /** An answer recorded elsewhere (the pong route, another instance's lease write): heard, if the stream is held here. */
  answered(connectionId: string): void {
    if (this.heardAt.has(connectionId)) this.heardAt.set(connectionId, Date.now());
  }

  lastHeard(connectionId: string): number {
    return this.heardAt.get(connectionId) ?? 0;
  }

  end(connectionId: string): void {
    this.heardAt.delete(connectionId);
  }

  /** Writes the lease records still pending (a Workers request's last act). */
  async flush(): Promise<void> {
    await this.recorded.flush();
  }
}
