import { describe, expect, it } from 'vitest';
import { SendWindow } from '../../agent/invocations/window.js';
import { serveForwarded } from '../../functions/link/forwarded.js';
import { CLIENT_TOO_SLOW, FrameQueue } from '../../functions/link/frame-queue.js';
import type { FrameSink, LinkHolder } from '../../functions/link/holder.js';
import { RelayBudget } from '../../functions/link/relay-budget.js';
import type { Invoke } from '../../shared/contracts/relay.js';

/**
 * Flow control of a streamed answer (docs/relay.md, "Memory"): the agent sends at most a window ahead of the link
 * holder's credit (`SendWindow`), the holder credits what its consumer took (`FrameQueue`), a holder answering a
 * forwarded invocation credits only what its caller's connection took (`serveForwarded`), and a consumer that
 * takes nothing past the stall limit is cut.
 */
const settled = async (promise: Promise<void> | null): Promise<boolean> => {
  if (promise === null) return true;
  let done = false;
  void promise.then(() => (done = true));
  await new Promise((resolve) => setImmediate(resolve));
  return done;
};
const data = (o: number, bytes: number) => ({ o, t: 'data' as const, d: new Uint8Array(bytes) });

describe('SendWindow (agent)', () => {
  const live = new AbortController().signal;

  it('sends freely within the window and waits past it until credit makes room', async () => {
    const window = new SendWindow(100);
    expect(window.take(60, live)).toBeNull();
    expect(window.take(40, live)).toBeNull();
    const waiting = window.take(10, live);
    expect(await settled(waiting)).toBe(false);
    // Credit that frees too little keeps it waiting; enough lets it go.
    window.credit(5);
    expect(await settled(waiting)).toBe(false);
    window.credit(10);
    expect(await settled(waiting)).toBe(true);
    // Counted once it went: 110 sent, 10 credited, so 0 more fit.
    expect(await settled(window.take(1, live))).toBe(false);
  });

  it('never holds a piece back while nothing is outstanding, however large', () => {
    const window = new SendWindow(100);
    expect(window.take(500, live)).toBeNull();
    window.credit(500);
    expect(window.take(500, live)).toBeNull();
  });

  it('ignores credit lower than or equal to what it has', async () => {
    const window = new SendWindow(100);
    window.take(100, live);
    window.credit(50);
    window.credit(20);
    window.credit(50);
    expect(window.take(50, live)).toBeNull();
    expect(await settled(window.take(1, live))).toBe(false);
  });

  it('stops waiting when the invocation is aborted', async () => {
    const window = new SendWindow(10);
    const controller = new AbortController();
    window.take(10, controller.signal);
    const waiting = window.take(10, controller.signal);
    expect(await settled(waiting)).toBe(false);
    controller.abort('cancelled');
    expect(await settled(waiting)).toBe(true);
    // Aborted already: no wait at all.
    expect(window.take(10, controller.signal)).toBeNull();
  });
});

describe('FrameQueue pacing (plane)', () => {
  it('reports what its consumer took, not what arrived, and has room again once it took it', async () => {
    const queue = new FrameQueue({ budget: new RelayBudget(() => ({ streamed: 1_000, plain: 1_000, instance: 10_000 })), window: 100 });
    const passed: number[] = [];
    queue.onPassedOn = (bytes) => passed.push(bytes);
    expect(queue.room()).toBeNull();
    queue.frame({ o: 0, t: 'head', status: 200, contentType: 'text/event-stream' });
    queue.frame(data(1, 60));
    queue.frame(data(2, 60));
    expect(passed).toEqual([]);
    const full = queue.room();
    expect(await settled(full)).toBe(false);
    const item = await queue.next();
    expect(item?.kind === 'frames' && item.frames.length).toBe(3);
    expect(passed).toEqual([120]);
    expect(await settled(full)).toBe(true);
    expect(queue.room()).toBeNull();
    // Frames without data pass nothing on.
    queue.frame({ o: 3, t: 'end', tokens: 1, promptTokens: null, completionTokens: null });
    await queue.next();
    expect(passed).toEqual([120]);
  });

  it('cuts a consumer that takes nothing for the stall limit while frames wait, and frees what it held', async () => {
    const budget = new RelayBudget(() => ({ streamed: 1_000, plain: 1_000, instance: 10_000 }));
    const queue = new FrameQueue({ budget, window: 100, stallMs: 40 });
    let overflowed = 0;
    queue.onOverflow = () => (overflowed += 1);
    queue.frame(data(0, 50));
    const room = queue.room();
    expect(room).toBeNull();
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(overflowed).toBe(1);
    expect(budget.usage().held).toBe(0);
    expect(await queue.next()).toMatchObject({ kind: 'failed', code: CLIENT_TOO_SLOW });
  });

  it('keeps a consumer that takes within the stall limit, however long the answer lasts', async () => {
    const queue = new FrameQueue({ budget: null, window: 100, stallMs: 40 });
    let overflowed = 0;
    queue.onOverflow = () => (overflowed += 1);
    for (let o = 0; o < 6; o += 1) {
      queue.frame(data(o, 10));
      await new Promise((resolve) => setTimeout(resolve, 20));
      await queue.next();
    }
    expect(overflowed).toBe(0);
    queue.close();
  });
});

describe('serveForwarded pacing (link holder of a forwarded invocation)', () => {
  const invoke: Invoke = {
    invocationId: 'inv_paced',
    workloadId: 'wkl_paced',
    assignmentId: 'asg_1',
    path: '/v1/chat/completions',
    body: '{}',
    deadline: Date.now() + 60_000,
    idempotencyKey: null,
    stream: true,
    window: 1_000,
  };

  it("takes the caller's window and passes data on only once the caller's connection drained", async () => {
    let node!: FrameSink;
    const hub = {
      dispatch: async (_invoke: Invoke, _machineId: string, sink: FrameSink) => void (node = sink),
      cancel() {},
      release() {},
    } as unknown as LinkHolder;
    let drained!: () => void;
    let full = true;
    const run = serveForwarded(hub, invoke, 'mch_1', {
      write: () => {},
      end: () => {},
      ready: () => (full ? new Promise<void>((resolve) => (drained = resolve)) : null),
    });
    await run.dispatched;
    expect(node.window).toBe(1_000);
    const passed: number[] = [];
    node.onPassedOn = (bytes) => passed.push(bytes);
    node.frame(data(0, 300));
    node.frame(data(1, 200));
    await new Promise((resolve) => setImmediate(resolve));
    expect(passed).toEqual([]);
    full = false;
    drained();
    await new Promise((resolve) => setImmediate(resolve));
    expect(passed).toEqual([500]);
    node.frame(data(2, 50));
    await new Promise((resolve) => setImmediate(resolve));
    expect(passed).toEqual([500, 50]);
  });
});
