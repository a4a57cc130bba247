import { describe, expect, it } from 'vitest';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import type { FrameSink, LinkHolder } from '../../functions/link/holder.js';
import { readForwarded, serveForwarded } from '../../functions/link/forwarded.js';

/**
 * A forwarded invocation's frames (functions/link/forwarded.ts) are decoded by the link holder and encoded again
 * for the caller, over the peer channel on Node and from a machine's Durable Object on Workers: what the agent
 * said, its usage included, reaches the caller as it was said.
 */
describe('forwarded frames', () => {
  const invoke: Invoke = {
    invocationId: 'inv_forwarded',
    workloadId: 'wkl_forwarded',
    assignmentId: 'asg_1',
    path: '/v1/chat/completions',
    body: '{}',
    deadline: Date.now() + 60_000,
    idempotencyKey: null,
    stream: true,
  };

  /** Runs `frames` through the holder's half and reads its answer with the caller's half. */
  async function relayed(frames: Frame[]): Promise<Array<Frame | { failed: string }>> {
    let node!: FrameSink;
    const hub = {
      dispatch: async (_invoke: Invoke, _machineId: string, sink: FrameSink) => void (node = sink),
      cancel() {},
      release() {},
    } as unknown as LinkHolder;
    const chunks: Uint8Array[] = [];
    let ended!: () => void;
    const done = new Promise<void>((resolve) => (ended = resolve));
    const run = serveForwarded(hub, invoke, 'mch_1', { write: (written) => chunks.push(...written), end: () => ended() });
    await run.dispatched;
    for (const frame of frames) node.frame(frame);
    await done;
    const received: Array<Frame | { failed: string }> = [];
    async function* body() {
      yield* chunks;
    }
    await readForwarded(body(), { frame: (frame) => received.push(frame), fail: (code) => received.push({ failed: code }) }, () => false);
    return received.map((frame) => ('t' in frame && frame.t === 'data' ? { ...frame, d: new Uint8Array(frame.d) } : frame));
  }

  it("carries the end frame's usage through the holder's re-encoding", async () => {
    const frames: Frame[] = [
      { o: 0, t: 'accept' },
      { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' },
      { o: 2, t: 'data', d: new TextEncoder().encode('data: {"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\ndata: [DONE]\n\n') },
      { o: 3, t: 'end', tokens: 2, promptTokens: 3, completionTokens: 2 },
    ];
    expect(await relayed(frames)).toEqual(frames);
  });

  it('carries an unknown usage (an older agent, or a runtime that sent none) as unknown', async () => {
    const frames: Frame[] = [
      { o: 0, t: 'accept' },
      { o: 1, t: 'end', tokens: 9, promptTokens: null, completionTokens: null },
    ];
    expect(await relayed(frames)).toEqual(frames);
  });
});
