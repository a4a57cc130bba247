/** The bounds of what one instance holds of answers on their way to clients (docs/relay.md, "Memory"). */
export interface RelayLimits {
  /** One streamed answer's bytes held for a client that reads slower than the runtime writes. */
  streamed: number;
  /** One answer that is not streamed, held whole before it is sent. */
  plain: number;
  /** Everything this instance holds, summed. */
  instance: number;
}

/**
 * The instance's account of answer bytes held in memory between a node's uplink and a client. Every holder asks
 * before it keeps more; a refusal is the holder's to act on (the client is cut, the answer refused), so that a
 * client that stops reading costs the instance a bounded amount, never the whole answer.
 */
export class RelayBudget {
  private held = 0;
  private peak = 0;

  constructor(private readonly limits: () => RelayLimits) {}

  /** Counts `bytes` more for a holder already holding `holding`, if both its bound and the instance's allow. */
  take(kind: 'streamed' | 'plain', holding: number, bytes: number): boolean {
    const limits = this.limits();
    if (holding + bytes > limits[kind] || this.held + bytes > limits.instance) return false;
    this.held += bytes;
    if (this.held > this.peak) this.peak = this.held;
    return true;
  }

  give(bytes: number): void {
    this.held -= bytes;
  }

  /** Bytes held now, and the most held at once since the instance started. */
  usage(): { held: number; peak: number } {
    return { held: this.held, peak: this.peak };
  }
}
