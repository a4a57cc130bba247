import { describe, expect, it } from 'vitest';
import { Admission } from '../../functions/dataplane/admission.js';

describe('the lanes of a replica', () => {
  const far = () => Date.now() + 60_000;
  const signal = () => new AbortController().signal;

  it('hands a freed slot to an interactive request before any batch row that waited longer', async () => {
    const admission = new Admission();
    await admission.acquire('r', 1, far(), signal(), 'batch');
    const order: string[] = [];
    const waiting = [
      admission.acquire('r', 1, far(), signal(), 'batch').then(() => order.push('batch-1')),
      admission.acquire('r', 1, far(), signal(), 'batch').then(() => order.push('batch-2')),
      admission.acquire('r', 1, far(), signal()).then(() => order.push('interactive-1')),
      admission.acquire('r', 1, far(), signal(), 'interactive').then(() => order.push('interactive-2')),
    ];
    expect(admission.load('r')).toEqual({ active: 1, queued: 4 });
    // Each release frees the slot of the lane that held it: the batch row first, then the others as they were granted.
    for (const lane of ['batch', 'interactive', 'interactive', 'batch'] as const) {
      admission.release('r', lane);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(waiting);
    expect(order).toEqual(['interactive-1', 'interactive-2', 'batch-1', 'batch-2']);
  });

  it('lets batch rows use every free slot while no interactive request waits', async () => {
    const admission = new Admission();
    for (let i = 0; i < 3; i++) expect(await admission.acquire('r', 3, far(), signal(), 'batch')).toBe(0);
    expect(admission.load('r')).toEqual({ active: 3, queued: 0 });
  });

  it('takes a cancelled waiter out of either lane', async () => {
    const admission = new Admission();
    await admission.acquire('r', 1, far(), signal());
    const gone = new AbortController();
    const cancelled = admission.acquire('r', 1, far(), gone.signal, 'batch');
    const kept = admission.acquire('r', 1, far(), signal(), 'batch');
    gone.abort();
    await expect(cancelled).rejects.toMatchObject({ reason: 'cancelled' });
    expect(admission.load('r').queued).toBe(1);
    admission.release('r', 'interactive');
    await expect(kept).resolves.toBeGreaterThanOrEqual(0);
  });
});

describe('slots kept from batch rows for interactive traffic', () => {
  const far = () => Date.now() + 60_000;
  const signal = () => new AbortController().signal;

  it('lets batch rows take every slot of a replica no interactive request came to lately', async () => {
    const admission = new Admission();
    for (let i = 0; i < 6; i++) expect(await admission.acquire('r', 6, far(), signal(), 'batch')).toBe(0);
    expect(admission.load('r')).toEqual({ active: 6, queued: 0 });
  });

  it('keeps half the slots from batch rows while interactive requests come, so the next one does not wait', async () => {
    const admission = new Admission();
    await admission.acquire('r', 6, far(), signal());
    admission.release('r');
    // Three batch rows take slots; the fourth waits although three slots are free.
    for (let i = 0; i < 3; i++) expect(await admission.acquire('r', 6, far(), signal(), 'batch')).toBe(0);
    let waited = 0;
    const fifth = admission.acquire('r', 6, far(), signal(), 'batch').then(() => (waited += 1));
    await new Promise((resolve) => setImmediate(resolve));
    expect(admission.load('r')).toEqual({ active: 3, queued: 1 });
    // An interactive request finds a slot at once.
    expect(await admission.acquire('r', 6, far(), signal())).toBe(0);
    admission.release('r', 'interactive');
    expect(waited).toBe(0);
    // A batch row ending hands its slot to the waiting row.
    admission.release('r', 'batch');
    await fifth;
    expect(admission.load('r')).toEqual({ active: 3, queued: 0 });
  });
});

describe('batch rows backing off for interactive TTFT', () => {
  const far = () => Date.now() + 60_000;
  const signal = () => new AbortController().signal;
  const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  /** An interactive request on `r` whose first byte comes `ms` after its slot was granted. */
  async function interactive(admission: Admission, ms: number) {
    const slot = await admission.hold('r', 8, far(), signal(), 'interactive');
    await tick(ms);
    slot.firstByte();
    slot.release();
  }

  it('holds fewer slots for batch rows after interactive TTFT rose, and the freed ones stay free', async () => {
    const admission = new Admission();
    await interactive(admission, 1);
    // Half of eight: four batch rows run, a fifth waits.
    const rows = [];
    for (let i = 0; i < 4; i++) rows.push(await admission.hold('r', 8, far(), signal(), 'batch'));
    const fifth = admission.hold('r', 8, far(), signal(), 'batch');
    await new Promise((resolve) => setImmediate(resolve));
    expect(admission.load('r')).toEqual({ active: 4, queued: 1 });
    // Interactive TTFT rose well past the pace: batch rows may hold two slots now.
    await interactive(admission, 200);
    rows.shift()!.release();
    rows.shift()!.release();
    await new Promise((resolve) => setImmediate(resolve));
    // Two left running, the fifth still waits: it would have been a third.
    expect(admission.load('r')).toEqual({ active: 2, queued: 1 });
    rows.shift()!.release();
    expect(await fifth).toMatchObject({ queueMs: expect.any(Number) });
    expect(admission.load('r')).toEqual({ active: 2, queued: 0 });
  });

  it('counts a slot once however often it is released, and its first byte only while held', async () => {
    const admission = new Admission();
    const slot = await admission.hold('r', 2, far(), signal(), 'interactive');
    const other = await admission.hold('r', 2, far(), signal(), 'interactive');
    slot.release();
    slot.release();
    slot.firstByte();
    expect(admission.load('r')).toEqual({ active: 1, queued: 0 });
    other.release();
    expect(admission.load('r')).toEqual({ active: 0, queued: 0 });
  });

  it("counts what it forwarded to a holder elsewhere as the replica's load here, until released once", () => {
    const admission = new Admission();
    const a = admission.forwardedSlot('r');
    admission.forwardedSlot('r');
    expect(admission.load('r')).toEqual({ active: 2, queued: 0 });
    a.release();
    a.release();
    expect(admission.load('r')).toEqual({ active: 1, queued: 0 });
  });
});

describe("a replica's load as each lane sees it", () => {
  it('counts queued batch rows ahead of a batch row but not ahead of an interactive request; running ones for both', async () => {
    const admission = new Admission();
    const far = Date.now() + 60_000;
    await admission.acquire('r', 1, far, new AbortController().signal, 'batch');
    const waiting = new AbortController();
    const rows = [1, 2].map(() => admission.acquire('r', 1, far, waiting.signal, 'batch').catch(() => null));
    expect(admission.load('r', 'batch')).toEqual({ active: 1, queued: 2 });
    expect(admission.load('r', 'interactive')).toEqual({ active: 1, queued: 0 });
    waiting.abort();
    await Promise.all(rows);
  });
});
