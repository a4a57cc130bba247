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
    for (let i = 0; i < 4; i++) {
      admission.release('r');
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
    admission.release('r');
    await expect(kept).resolves.toBeGreaterThanOrEqual(0);
  });
});
