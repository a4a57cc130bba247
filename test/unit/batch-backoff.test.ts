import { describe, expect, it } from 'vitest';
import {
  type BatchBackoff,
  batchShare,
  batchSlotsOf,
  initialBackoff,
  observeInteractiveTtft,
  RISE,
  SLACK_MS,
} from '../../functions/core/scheduler/batch-backoff.js';

const feed = (state: BatchBackoff, samples: number[], concurrency: number) => samples.reduce((s, ttft) => observeInteractiveTtft(s, ttft, concurrency), state);

describe("batch rows' share of a replica while interactive requests come", () => {
  it('is half the slots, keeps one for interactive traffic, and leaves batch rows one at least', () => {
    expect([1, 2, 3, 4, 5, 8, 16].map(batchShare)).toEqual([1, 1, 1, 2, 2, 4, 8]);
    expect(batchSlotsOf(initialBackoff(8), 8)).toBe(4);
  });

  it('takes the first interactive TTFT as the pace and keeps the share while TTFT stays near it', () => {
    const state = feed(initialBackoff(8), [20, 21, 22, 20, 24], 8);
    // The lowest, drifting a little toward the later ones.
    expect(state.paceMs).toBeGreaterThanOrEqual(20);
    expect(state.paceMs).toBeLessThan(20.5);
    expect(batchSlotsOf(state, 8)).toBe(4);
  });

  it('halves the ceiling on each rise past RISE x pace + slack, down to one slot and never below', () => {
    const rise = 20 * RISE + SLACK_MS + 1;
    let state = feed(initialBackoff(16), [20], 16);
    expect(batchSlotsOf(state, 16)).toBe(8);
    state = observeInteractiveTtft(state, rise, 16);
    expect(batchSlotsOf(state, 16)).toBe(4);
    state = observeInteractiveTtft(state, rise, 16);
    expect(batchSlotsOf(state, 16)).toBe(2);
    state = feed(state, [rise, rise, rise, rise], 16);
    expect(state.ceiling).toBeGreaterThanOrEqual(1);
    expect(batchSlotsOf(state, 16)).toBe(1);
  });

  it('does not count jitter within the slack as a rise', () => {
    const state = feed(initialBackoff(8), [20, 20 * RISE + SLACK_MS - 0.5], 8);
    expect(batchSlotsOf(state, 8)).toBe(4);
  });

  it('gives slots back step by step once TTFT is back near the pace, up to the share and not past it', () => {
    const rise = 100;
    let state = feed(initialBackoff(8), [20, rise, rise], 8);
    expect(batchSlotsOf(state, 8)).toBe(1);
    // Four steps of a quarter slot give one back: no flapping back to the whole share on one good answer.
    state = observeInteractiveTtft(state, 20, 8);
    expect(batchSlotsOf(state, 8)).toBe(1);
    state = feed(state, [20, 20, 20], 8);
    expect(batchSlotsOf(state, 8)).toBe(2);
    state = feed(
      state,
      Array.from({ length: 40 }, () => 20),
      8,
    );
    expect(state.ceiling).toBe(4);
    expect(batchSlotsOf(state, 8)).toBe(4);
  });

  it('lets the pace drift up toward a runtime that became slower for good, so that it stops backing off', () => {
    let state = feed(initialBackoff(8), [20], 8);
    // The runtime now answers in 60 ms: at first each answer is a rise, then the pace follows and they are not.
    state = feed(
      state,
      Array.from({ length: 200 }, () => 60),
      8,
    );
    expect(state.paceMs).toBeGreaterThan((60 - SLACK_MS) / RISE);
    state = feed(
      state,
      Array.from({ length: 20 }, () => 60),
      8,
    );
    expect(batchSlotsOf(state, 8)).toBe(4);
  });

  it('ignores a measure that is no duration', () => {
    const state = feed(initialBackoff(8), [20], 8);
    for (const bad of [Number.NaN, -1, Number.POSITIVE_INFINITY]) expect(observeInteractiveTtft(state, bad, 8)).toBe(state);
  });

  it('keeps batch rows to one slot on a replica of one or two, whatever TTFT does', () => {
    for (const concurrency of [1, 2]) {
      expect(batchSlotsOf(feed(initialBackoff(concurrency), [20, 500, 500], concurrency), concurrency)).toBe(1);
      expect(batchSlotsOf(feed(initialBackoff(concurrency), [20, 20, 20, 20], concurrency), concurrency)).toBe(1);
    }
  });
});
