import { describe, expect, it } from 'vitest';
import { batchProgress, DEFAULT_RATE_WINDOW_MS, type ProgressSample } from '../../shared/batch/progress.js';

const NOW = 1_700_000_000_000;
const S = 1000;

describe('batchProgress', () => {
  it('measures the rate over a minute by default', () => {
    expect(DEFAULT_RATE_WINDOW_MS).toBe(60 * S);
  });

  it('knows no rate and no ETA before any sample, nor a remainder before the total is known', () => {
    expect(batchProgress({ samples: [], total: 100, failed: 0, now: NOW })).toEqual({
      total: 100,
      done: 0,
      failed: 0,
      succeeded: 0,
      remaining: 100,
      rate: null,
      etaMs: null,
    });
    expect(
      batchProgress({
        samples: [
          { at: NOW - 10 * S, done: 0 },
          { at: NOW, done: 50 },
        ],
        total: null,
        failed: 0,
        now: NOW,
      }),
    ).toMatchObject({
      total: null,
      done: 50,
      remaining: null,
      rate: 5,
      etaMs: null,
    });
  });

  it('needs two samples in the window: one gives rows done but no rate', () => {
    const progress = batchProgress({ samples: [{ at: NOW - S, done: 10 }], total: 100, failed: 0, now: NOW });
    expect(progress).toMatchObject({ done: 10, remaining: 90, rate: null, etaMs: null });
  });

  it('gives rows per second between the oldest and newest sample of the window, and the ETA at that rate', () => {
    const samples: ProgressSample[] = [
      { at: NOW - 50 * S, done: 100 },
      { at: NOW - 30 * S, done: 200 },
      { at: NOW - 10 * S, done: 500 },
    ];
    // 400 rows in 40 s: 10 rows/s; 1500 left: 150 s.
    expect(batchProgress({ samples, total: 2000, failed: 25, now: NOW })).toEqual({
      total: 2000,
      done: 500,
      failed: 25,
      succeeded: 475,
      remaining: 1500,
      rate: 10,
      etaMs: 150_000,
    });
  });

  it('rounds the ETA up to the next millisecond', () => {
    const samples = [
      { at: NOW - 3 * S, done: 0 },
      { at: NOW, done: 3 },
    ];
    // 3 rows in 3 s, 7 left: exactly 7 s. 3 rows in 2.9 s: 7 / (3 / 2.9) s = 6766.66... ms, so 6767.
    expect(batchProgress({ samples, total: 10, failed: 0, now: NOW }).etaMs).toBe(7000);
    expect(batchProgress({ samples: [{ at: NOW - 2900, done: 0 }, samples[1]!], total: 10, failed: 0, now: NOW }).etaMs).toBe(6767);
  });

  it('leaves out samples older than the window, and any after now', () => {
    const samples: ProgressSample[] = [
      { at: NOW - 10 * 60 * S, done: 0 },
      { at: NOW - 20 * S, done: 1000 },
      { at: NOW, done: 1200 },
      { at: NOW + 5 * S, done: 5000 },
    ];
    // 200 rows in 20 s, not 1200 in 10 minutes; the newest sample is still the rows done.
    expect(batchProgress({ samples, total: 10_000, failed: 0, now: NOW })).toMatchObject({ done: 5000, rate: 10 });
    // A window of 15 minutes reaches the first sample.
    expect(batchProgress({ samples, total: 10_000, failed: 0, now: NOW, windowMs: 15 * 60 * S }).rate).toBe(2);
    // A window of 5 s holds one sample: no rate.
    expect(batchProgress({ samples, total: 10_000, failed: 0, now: NOW, windowMs: 5 * S }).rate).toBeNull();
  });

  it('has no rate when sampling stopped a window ago, rather than a stale one', () => {
    const samples = [
      { at: NOW - 5 * 60 * S, done: 0 },
      { at: NOW - 4 * 60 * S, done: 600 },
    ];
    expect(batchProgress({ samples, total: 1000, failed: 0, now: NOW })).toMatchObject({ done: 600, rate: null, etaMs: null });
  });

  it('does not credit a job restarted from a checkpoint with the rows it had done', () => {
    const samples = [
      { at: NOW - 10 * S, done: 90_000 },
      { at: NOW, done: 90_050 },
    ];
    expect(batchProgress({ samples, total: 100_000, failed: 0, now: NOW })).toMatchObject({ rate: 5, remaining: 9950, etaMs: 1_990_000 });
  });

  it('gives a rate of 0 and no ETA to a stalled job, and an ETA of 0 to a finished one', () => {
    const stalled = [
      { at: NOW - 30 * S, done: 40 },
      { at: NOW, done: 40 },
    ];
    expect(batchProgress({ samples: stalled, total: 100, failed: 0, now: NOW })).toMatchObject({ rate: 0, etaMs: null });
    expect(batchProgress({ samples: [{ at: NOW, done: 100 }], total: 100, failed: 3, now: NOW })).toMatchObject({
      remaining: 0,
      rate: null,
      etaMs: 0,
      succeeded: 97,
    });
    expect(batchProgress({ samples: [], total: 0, failed: 0, now: NOW })).toMatchObject({ remaining: 0, etaMs: 0 });
  });

  it('gives the same answer whatever the order of its samples', () => {
    const samples: ProgressSample[] = [
      { at: NOW - 40 * S, done: 10 },
      { at: NOW - 20 * S, done: 50 },
      { at: NOW - 5 * S, done: 80 },
      { at: NOW - 30 * S, done: 20 },
    ];
    const sorted = [...samples].sort((a, b) => a.at - b.at);
    const expected = batchProgress({ samples: sorted, total: 1000, failed: 1, now: NOW });
    expect(expected).toMatchObject({ done: 80, rate: 2 });
    expect(batchProgress({ samples, total: 1000, failed: 1, now: NOW })).toEqual(expected);
    expect(batchProgress({ samples: [...samples].reverse(), total: 1000, failed: 1, now: NOW })).toEqual(expected);
  });

  it('never counts rows going back as a negative rate', () => {
    const samples = [
      { at: NOW - 10 * S, done: 100 },
      { at: NOW, done: 90 },
    ];
    expect(batchProgress({ samples, total: 200, failed: 0, now: NOW })).toMatchObject({ done: 90, rate: 0, etaMs: null });
  });
});
