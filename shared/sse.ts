/** One Server-Sent Events item: a message (its `event` is `message` when unnamed) or a comment line (keep-alive). */
export type SseItem = { kind: 'event'; event: string; data: string; id: string | undefined } | { kind: 'comment'; text: string };

/**
 * An incremental SSE parser (the subset of the WHATWG format our streams use: `event`, `data`, `id` and
 * comments; any line ending). Feed it decoded text as it arrives; it emits each item once its block ends.
 */
export class SseParser {
  private buffer = '';
  /** A trailing `\r` whose `\n` may open the next chunk. */
  private carry = '';

  constructor(private readonly emit: (item: SseItem) => void) {}

  feed(chunk: string): void {
    let text = this.carry + chunk;
    this.carry = '';
    if (text.endsWith('\r')) {
      this.carry = '\r';
      text = text.slice(0, -1);
    }
    this.buffer += text.includes('\r') ? text.replace(/\r\n?/g, '\n') : text;
    let cut: number;
    while ((cut = this.buffer.indexOf('\n\n')) >= 0) {
      const block = this.buffer.slice(0, cut);
      this.buffer = this.buffer.slice(cut + 2);
      this.parseBlock(block);
    }
  }

  private parseBlock(block: string): void {
    let event = 'message';
    let id: string | undefined;
    const data: string[] = [];
    let hasField = false;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        this.emit({ kind: 'comment', text: line.slice(1).trim() });
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
      hasField = true;
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') id = value;
    }
    if (hasField) this.emit({ kind: 'event', event, data: data.join('\n'), id });
  }
}
