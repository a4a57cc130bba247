/**
 * Reads CSV as RFC 4180 defines it (quoted fields, doubled quotes, CRLF records), independently of the writer
 * (`shared/csv.ts`), so that the tests check the format and not the writer against itself.
 */
export function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let at = 0;
  while (at < text.length) {
    if (text[at] === '"' && field === '') {
      // A quoted field runs to the quote that is not doubled.
      at += 1;
      for (;;) {
        if (at >= text.length) throw new Error('unterminated quoted field');
        if (text[at] === '"' && text[at + 1] === '"') {
          field += '"';
          at += 2;
        } else if (text[at] === '"') {
          at += 1;
          break;
        } else field += text[at++];
      }
      if (at < text.length && text[at] !== ',' && !text.startsWith('\r\n', at)) throw new Error(`text after a quoted field at ${at}`);
    } else if (text[at] === ',') {
      record.push(field);
      field = '';
      at += 1;
    } else if (text.startsWith('\r\n', at)) {
      record.push(field);
      records.push(record);
      record = [];
      field = '';
      at += 2;
    } else {
      if (text[at] === '"' || text[at] === '\n' || text[at] === '\r') throw new Error(`a bare ${JSON.stringify(text[at])} in an unquoted field at ${at}`);
      field += text[at++];
    }
  }
  if (field !== '' || record.length > 0) throw new Error('the last record does not end with CRLF');
  return records;
}
