/**
 * Flow control of one invocation (docs/relay.md, "Memory"): the data bytes sent beyond what the link holder has
 * credited stay within the window the invoke named, so a client that stops reading stops this agent reading the
 * runtime (its socket fills, and a runtime that honours back-pressure stops generating) instead of the answer
 * piling up in the control plane.
 */
export class SendWindow {
  private sent = 0;
  private credited = 0;
  private wake: (() => void) | null = null;

  constructor(private readonly size: number) {}

  /** The holder's running total of what it passed on: a lower or repeated one changes nothing. */
  credit(total: number): void {
    if (total <= this.credited) return;
    this.credited = total;
    this.wake?.();
  }

  /**
   * Counts `bytes` about to be sent. Null when they fit now; else settles once credit made room or `signal`
   * aborted. A piece is never held back while nothing is outstanding, so one larger than the window still goes.
   */
  take(bytes: number, signal: AbortSignal): Promise<void> | null {
    if (!this.fits(bytes) && !signal.aborted) return this.waitFor(bytes, signal);
    this.sent += bytes;
    return null;
  }

  private fits(bytes: number): boolean {
    const outstanding = this.sent - this.credited;
    return outstanding === 0 || outstanding + bytes <= this.size;
  }

  private async waitFor(bytes: number, signal: AbortSignal): Promise<void> {
    const abort = () => this.wake?.();
    signal.addEventListener('abort', abort, { once: true });
    try {
      while (!this.fits(bytes) && !signal.aborted) await new Promise<void>((resolve) => (this.wake = resolve));
      this.sent += bytes;
    } finally {
      this.wake = null;
      signal.removeEventListener('abort', abort);
    }
  }
}
