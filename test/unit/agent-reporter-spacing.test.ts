import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LOAD_REPORT_SPACING_MS, Reporter } from '../../agent/reporter/reporter.js';

/** A reporter whose heartbeats land in `sent` (the times they were sent, ms after the start). */
function reporter() {
  const sent: number[] = [];
  const started = Date.now();
  const r = new Reporter({
    client: {
      request: (async () => {
        sent.push(Date.now() - started);
        return { success: true, data: { heartbeatIntervalMs: 60_000 } };
      }) as never,
    },
    clock: { resync: async () => {} },
    intervalMs: 60_000,
    observe: () => ({}) as never,
    onAccepted: () => {},
    onRevoked: () => {},
    afterKeepAlive: async () => {},
    counters: { heartbeat_failures_total: 0 },
    log: () => {},
  });
  return { r, sent };
}

describe('the spacing of change reports', () => {
  beforeEach(() => void vi.useFakeTimers());
  afterEach(() => void vi.useRealTimers());

  it('sends a burst of changes as one report, and a moved load at most once a second', async () => {
    const { r, sent } = reporter();
    for (let i = 0; i < 5; i++) r.soon();
    await vi.advanceTimersByTimeAsync(10);
    expect(sent).toEqual([0]);
    // A load that only moved waits its spacing after the last report, however often it moves.
    for (let i = 0; i < 20; i++) {
      r.soon(LOAD_REPORT_SPACING_MS);
      await vi.advanceTimersByTimeAsync(100);
    }
    expect(sent).toEqual([0, 1_000, 2_000]);
    await r.close();
  });

  it('sends an edge sooner than a moved load scheduled before it', async () => {
    const { r, sent } = reporter();
    r.soon();
    await vi.advanceTimersByTimeAsync(10);
    r.soon(LOAD_REPORT_SPACING_MS);
    await vi.advanceTimersByTimeAsync(100);
    // A runtime went idle: 250 ms after the last report, not the second a moved load waits.
    r.soon();
    await vi.advanceTimersByTimeAsync(200);
    expect(sent).toEqual([0, 250]);
    // The later, moved-load report is not sent besides it.
    await vi.advanceTimersByTimeAsync(2_000);
    expect(sent).toEqual([0, 250]);
    await r.close();
  });
});
