import { describe, expect, it } from 'vitest';
import { watchUntilReady } from '../../functions/hosts/dev/ready-watch.js';
import { waitFor } from '../helpers/plane.js';

describe('the launcher waiting for its nodes', () => {
  it('survives a check that throws (the store is away), reports it once per outage, and announces readiness once', async () => {
    const answers: Array<boolean | Error> = [false, new Error('connection refused'), new Error('connection refused'), false, new Error('again'), true, true];
    const errors: string[] = [];
    let ready = 0;
    let calls = 0;
    const watch = watchUntilReady({
      intervalMs: 5,
      check: async () => {
        const answer = answers[Math.min(calls++, answers.length - 1)]!;
        if (answer instanceof Error) throw answer;
        return answer;
      },
      onReady: () => (ready += 1),
      onError: (error) => errors.push((error as Error).message),
    });
    await waitFor(async () => ready === 1, { timeoutMs: 2_000, intervalMs: 5, what: 'ready' });
    await new Promise((r) => setTimeout(r, 50));
    watch.stop();
    expect(ready).toBe(1);
    expect(calls).toBe(6);
    expect(errors).toEqual(['connection refused', 'again']);
  });
});
