import { open, stat, truncate } from 'node:fs/promises';

/**
 * A bounded view of a runtime's output file. The runtime appends to the file (O_APPEND, so it survives an
 * agent restart); the agent keeps the last `maxLines` lines in memory and truncates the file once it grows
 * past `maxFileBytes`, so neither memory nor disk grows without bound.
 */
export class LogRing {
  private lines: string[] = [];
  private offset = 0;
  private partial = '';

  constructor(
    private readonly path: string,
    private readonly maxLines = 1000,
    private readonly maxFileBytes = 4 * 1024 * 1024,
  ) {}

  /** Reads what the runtime appended since the last call. */
  async poll(): Promise<void> {
    let size: number;
    try {
      size = (await stat(this.path)).size;
    } catch {
      return;
    }
    if (size < this.offset) this.offset = 0;
    if (size === this.offset) return;
    const file = await open(this.path, 'r');
    try {
      const length = Math.min(size - this.offset, this.maxFileBytes);
      const buffer = Buffer.alloc(length);
      await file.read(buffer, 0, length, size - length);
      this.offset = size;
      const text = this.partial + buffer.toString('utf8');
      const parts = text.split('\n');
      this.partial = parts.pop() ?? '';
      this.lines.push(...parts);
      if (this.lines.length > this.maxLines) this.lines = this.lines.slice(-this.maxLines);
    } finally {
      await file.close();
    }
    if (size > this.maxFileBytes) {
      await truncate(this.path, 0);
      this.offset = 0;
    }
  }

  tail(lines: number): string[] {
    return this.lines.slice(-Math.max(0, lines));
  }
}
