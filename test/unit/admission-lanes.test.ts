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
