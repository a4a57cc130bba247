import { describe, expect, it } from 'vitest';
import { WriteBehind } from '../../functions/store/write-behind.js';

/** A store stand-in that records each batch and can hold a write open until released. */
function recorder() {
  const batches: string[][] = [];
  const holds: Array<() => void> = [];
  let hold = false;
  const write = async (items: string[]) => {
    batches.push(items);
    if (hold) await new Promise<void>((resolve) => holds.push(resolve));
  };
  return {
    batches,
    write,
    holdWrites: (on: boolean) => (hold = on),
    release: () => {
      for (const r of holds.splice(0)) r();
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const noErrors = () => {
  throw new Error('unexpected write error');
};

describe('WriteBehind', () => {
  it('writes the items of one delay window as one batch', async () => {
    const r = recorder();
    const wb = new WriteBehind(r.write, { delayMs: 20, maxBatch: 100, onError: noErrors });
    wb.put('a', 'a1');
    wb.put('b', 'b1');
    expect(r.batches).toEqual([]);
    await sleep(60);
    expect(r.batches).toEqual([['a1', 'b1']]);
  });

  it('keeps only the last pending item of a key', async () => {
    const r = recorder();
    const wb = new WriteBehind(r.write, { delayMs: 1_000, maxBatch: 100, onError: noErrors });
    wb.put('a', 'running');
    wb.put('b', 'b');
    wb.put('a', 'succeeded');
    await wb.flush();
    expect(r.batches).toEqual([['succeeded', 'b']]);
  });

  it('writes at once when a batch is full', async () => {
    const r = recorder();
    const wb = new WriteBehind(r.write, { delayMs: 60_000, maxBatch: 3, onError: noErrors });
    for (const k of ['a', 'b', 'c']) wb.put(k, k);
    await sleep(0);
    expect(r.batches).toEqual([['a', 'b', 'c']]);
  });

  it('writes each item at once with no delay', async () => {
    const r = recorder();
    const wb = new WriteBehind(r.write, { delayMs: 0, maxBatch: 100, onError: noErrors });
    wb.put('a', 'a');
    await wb.flush();
    wb.put('b', 'b');
    await wb.flush();
    expect(r.batches).toEqual([['a'], ['b']]);
  });

  it('never overlaps batches, so a later state of a key lands after an earlier one', async () => {
    const r = recorder();
    const wb = new WriteBehind(r.write, { delayMs: 60_000, maxBatch: 100, onError: noErrors });
    r.holdWrites(true);
    wb.put('a', 'running');
    const first = wb.flush();
    await sleep(0);
    wb.put('a', 'succeeded');
    const second = wb.flush();
    await sleep(10);
    // The second batch waits for the first to finish.
    expect(r.batches).toEqual([['running']]);
    r.holdWrites(false);
    r.release();
    await Promise.all([first, second]);
    expect(r.batches).toEqual([['running'], ['succeeded']]);
  });

  it('flush resolves only once everything queued before it is written, including a batch already in flight', async () => {
    const r = recorder();
    const wb = new WriteBehind(r.write, { delayMs: 60_000, maxBatch: 100, onError: noErrors });
    r.holdWrites(true);
    wb.put('a', 'a');
    void wb.flush();
    let flushed = false;
    const waiting = wb.flush().then(() => (flushed = true));
    await sleep(10);
    expect(flushed).toBe(false);
    r.holdWrites(false);
    r.release();
    await waiting;
    expect(flushed).toBe(true);
    expect(r.batches).toEqual([['a']]);
  });

  it('reports a failed batch with its size and goes on writing the next ones', async () => {
    const failures: number[] = [];
    let calls = 0;
    const written: string[][] = [];
    const wb = new WriteBehind<string>(
      async (items) => {
        calls += 1;
        if (calls === 1) throw new Error('store down');
        written.push(items);
      },
      { delayMs: 60_000, maxBatch: 100, onError: (_error, items) => failures.push(items) },
    );
    wb.put('a', 'a');
    wb.put('b', 'b');
    await wb.flush();
    wb.put('c', 'c');
    await wb.flush();
    expect(failures).toEqual([2]);
    expect(written).toEqual([['c']]);
  });
});
