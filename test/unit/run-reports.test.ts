import { describe, expect, it } from 'vitest';
import { reportedMoves } from '../../functions/core/runs/reports.js';

const moves = (input: Partial<Parameters<typeof reportedMoves>[0]> & Pick<Parameters<typeof reportedMoves>[0], 'from' | 'reported'>) => {
  const result = reportedMoves({ id: 'r-0', phase: 'start', exitCode: null, message: null, ...input });
  return 'refused' in result ? result.refused : result.events.map((e) => `${e.from}>${e.to}:${e.origin}`);
};

describe('reportedMoves', () => {
  it('takes one move its agent may make as it is', () => {
    expect(moves({ from: 'preparing', reported: 'pulling' })).toEqual(['preparing>pulling:agent']);
    expect(moves({ from: 'running', reported: 'running' })).toEqual([]);
  });

  it('fills in the steps between two reports of a worker told to start, its start the controller decision', () => {
    expect(moves({ from: 'pending', reported: 'running' })).toEqual([
      'pending>preparing:agent',
      'preparing>ready-to-start:agent',
      'ready-to-start>starting:controller',
      'starting>running:agent',
    ]);
    expect(moves({ from: 'pending', reported: 'ready-to-start' })).toEqual(['pending>preparing:agent', 'preparing>ready-to-start:agent']);
  });

  it('refuses a start a gang worker was never told, and a move out of a final state', () => {
    expect(moves({ from: 'ready-to-start', reported: 'running', phase: 'prepare' })).toBe(
      'worker r-0: the agent does not move a worker from ready-to-start to running',
    );
    expect(moves({ from: 'completed', reported: 'running' })).toBe('worker r-0: completed is final');
  });

  it('says why a worker failed, and re-adopts one on a machine that came back', () => {
    const failed = reportedMoves({ id: 'r-0', from: 'running', reported: 'failed', phase: 'start', exitCode: 137, message: null });
    expect('events' in failed && failed.events[0]!.reason).toBe('exited with code 137');
    expect(moves({ from: 'stale', reported: 'running' })).toEqual(['stale>running:agent']);
  });
});
