import { describe, expect, it } from 'vitest';
import { unseenLines } from '../../cli/commands/logs.js';

describe('unseenLines (logs --follow over a ring without sequence numbers)', () => {
  it('prints everything the first time', () => {
    expect(unseenLines([], ['a', 'b'])).toEqual(['a', 'b']);
  });
  it('prints only what follows the printed tail', () => {
    expect(unseenLines(['a', 'b', 'c'], ['b', 'c', 'd', 'e'])).toEqual(['d', 'e']);
  });
  it('prints nothing when nothing is new', () => {
    expect(unseenLines(['a', 'b'], ['a', 'b'])).toEqual([]);
  });
  it('prefers the longest overlap, so repeated lines are not printed twice', () => {
    expect(unseenLines(['x', 'x'], ['x', 'x', 'y'])).toEqual(['y']);
  });
  it('prints the whole tail when the ring moved past everything printed', () => {
    expect(unseenLines(['a', 'b'], ['p', 'q'])).toEqual(['p', 'q']);
  });
});
