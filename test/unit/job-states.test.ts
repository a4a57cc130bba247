import { describe, expect, it } from 'vitest';
import { afterRunner, batchStatus, isFinal, JOB_STATES, jobMove, type JobState } from '../../functions/core/jobs/states.js';

describe('job states', () => {
  it('moves every end through finalizing, and a final state nowhere', () => {
    for (const from of JOB_STATES) {
      for (const to of ['completed', 'failed', 'cancelled', 'expired'] as const) {
        const move = jobMove(from, to);
        expect('ok' in move, `${from} -> ${to}`).toBe(from === 'finalizing');
      }
    }
    for (const final of ['completed', 'failed', 'cancelled', 'expired'] as const) {
      expect(isFinal(final)).toBe(true);
      for (const to of JOB_STATES) expect(jobMove(final, to)).toEqual({ refused: `the job is ${final}` });
    }
    expect(jobMove('running', 'pending')).toEqual({ ok: true });
    expect(jobMove('pending', 'cancelling')).toEqual({ refused: 'a job does not move from pending to cancelling' });
    expect(jobMove('cancelling', 'running')).toHaveProperty('refused');
  });

  it("shows each state as the Batch API's status", () => {
    const shown = Object.fromEntries(JOB_STATES.map((s) => [s, batchStatus(s)]));
    expect(shown).toEqual({
      pending: 'validating',
      running: 'in_progress',
      finalizing: 'finalizing',
      completed: 'completed',
      failed: 'failed',
      cancelling: 'cancelling',
      cancelled: 'cancelled',
      expired: 'expired',
    });
  });
});

describe('after a runner ends', () => {
  const ended = (state: JobState, attempt: number, end: Parameters<typeof afterRunner>[0]['end']) => afterRunner({ state, attempt, maxAttempts: 3, end });

  it('finalizes a runner that said it was done, and any end of a cancelling job', () => {
    expect(ended('running', 0, { kind: 'done' })).toEqual({ next: 'finalize' });
    expect(ended('cancelling', 2, { kind: 'exited', code: 1, signal: null })).toEqual({ next: 'finalize' });
    expect(ended('cancelling', 0, { kind: 'lost' })).toEqual({ next: 'finalize' });
  });

  it('starts again while attempts are left, then fails saying how the last one ended', () => {
    expect(ended('running', 0, { kind: 'exited', code: 1, signal: null })).toEqual({ next: 'restart' });
    expect(ended('running', 1, { kind: 'lost' })).toEqual({ next: 'restart' });
    expect(ended('running', 2, { kind: 'exited', code: 3, signal: null })).toEqual({ next: 'fail', reason: 'its runner exited with code 3, attempt 3 of 3' });
    expect(ended('running', 2, { kind: 'exited', code: null, signal: 'SIGKILL' })).toEqual({
      next: 'fail',
      reason: 'its runner was killed by SIGKILL, attempt 3 of 3',
    });
    expect(ended('running', 2, { kind: 'lost' })).toEqual({ next: 'fail', reason: 'its runner was lost with its host, attempt 3 of 3' });
    expect(afterRunner({ state: 'running', attempt: 0, maxAttempts: 1, end: { kind: 'lost' } })).toMatchObject({ next: 'fail' });
  });
});
