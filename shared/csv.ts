/**
 * CSV as RFC 4180 writes it: fields separated by commas, records by CRLF, and a field holding a comma, a quote or
 * a line break quoted, its quotes doubled. Null is an empty field. Values are written as they are: a field that a
 * spreadsheet would take for a formula (`=`, `+`, `-`, `@`) is not altered, so that what is read back is what was
 * written.
 */
export function toCsv<K extends string>(columns: readonly K[], rows: ReadonlyArray<Record<K, string | number | null>>): string {
  const lines = [columns.map(field).join(',')];
  for (const row of rows) lines.push(columns.map((column) => field(row[column])).join(','));
  return `${lines.join('\r\n')}\r\n`;
}

function field(value: string | number | null): string {
  if (value === null) return '';
  const text = String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}
