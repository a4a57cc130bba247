/** Characters a terminal acts on rather than shows: C0 but tab and newline, DEL, and C1 (U+0080-U+009F). */
const CONTROL_CHARACTERS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/**
 * Text from a node (a runtime's log line, a runtime's message) as a terminal may show it: every control character
 * but tab and newline written visibly as `\xHH` (ESC as `\x1b`), so that what a runtime or machine wrote cannot
 * retitle the window, write the clipboard (OSC 52), move the cursor or erase what was printed before it.
 */
export function printableLine(line: string): string {
  return line.replace(CONTROL_CHARACTERS, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/**
 * A plain-text table: a header row and left-aligned columns as wide as their widest cell. Cells are shown with
 * `printableLine`: some (a runtime's message, an event's) are what a node reported.
 */
export function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const shown = rows.map((r) => r.map(printableLine));
  const widths = header.map((h, i) => Math.max(h.length, ...shown.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(header), ...shown.map(line)].join('\n');
}
