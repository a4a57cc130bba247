/**
 * What the agent learns from the end of a runtime's answer, without parsing the answer: the bytes are relayed
 * untouched, and only their last few KiB are kept, to look at once when the answer is over (whether a stream
 * ended with `[DONE]`, and the runtime's own `usage`).
 */

/**
 * Bytes kept from the end of an answer. Runtimes put `usage` last: at the end of a whole JSON body (vLLM, the
 * simulator), and in the final chunk before `[DONE]` of a stream asked with `stream_options.include_usage`. A
 * usage object with its details is a few hundred bytes; the final chunk's other fields (id, model) not many more.
 */
export const ANSWER_TAIL_BYTES = 2 * 1024;

/** The last `capacity` bytes pushed: at most `capacity` bytes copied per chunk, whatever its size. */
export class ByteTail {
  private readonly bytes: Buffer;
  private length = 0;

  constructor(capacity = ANSWER_TAIL_BYTES) {
    this.bytes = Buffer.allocUnsafe(capacity);
  }

  push(chunk: Uint8Array): void {
    const capacity = this.bytes.length;
    if (chunk.length >= capacity) {
      this.bytes.set(chunk.subarray(chunk.length - capacity));
      this.length = capacity;
      return;
    }
    const keep = Math.min(this.length, capacity - chunk.length);
    this.bytes.copyWithin(0, this.length - keep, this.length);
    this.bytes.set(chunk, keep);
    this.length = keep + chunk.length;
  }

  /** The kept bytes as text; a character cut at the start decodes as U+FFFD, which nothing here looks for. */
  text(): string {
    return this.bytes.toString('utf8', 0, this.length);
  }
}

/** Token counts as the runtime reported them; null where it did not (or not as a count). */
export interface RuntimeUsage {
  promptTokens: number | null;
  completionTokens: number | null;
}

export const NO_USAGE: RuntimeUsage = { promptTokens: null, completionTokens: null };

const USAGE_KEY = '"usage"';
/** The end frame carries counts as u32, its largest value meaning unknown. */
const MAX_COUNT = 0xfffffffe;

const count = (value: unknown): number | null => (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= MAX_COUNT ? value : null);

/**
 * The last `"usage":{...}` object in `text` (an answer's tail), read with one `JSON.parse` of that object alone.
 * Text a model generated cannot fake it: inside a JSON string its quotes are escaped (`\"usage\"`). A usage of
 * `null` (the chunks before the last of an `include_usage` stream), a usage object cut off by the start of the
 * tail, or one that is not JSON gives `NO_USAGE`.
 */
export function parseUsage(text: string): RuntimeUsage {
  const key = text.lastIndexOf(USAGE_KEY);
  if (key === -1) return NO_USAGE;
  let at = skipSpace(text, key + USAGE_KEY.length);
  if (text[at] !== ':') return NO_USAGE;
  const start = skipSpace(text, at + 1);
  if (text[start] !== '{') return NO_USAGE;
  // The object's end: braces counted outside strings (usage nests `*_tokens_details` objects).
  let depth = 0;
  let inString = false;
  for (at = start; at < text.length; at += 1) {
    const c = text[at];
    if (inString) {
      if (c === '\\') at += 1;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth += 1;
    else if (c === '}' && --depth === 0) break;
  }
  if (depth !== 0) return NO_USAGE;
  let usage: unknown;
  try {
    usage = JSON.parse(text.slice(start, at + 1));
  } catch {
    return NO_USAGE;
  }
  const { prompt_tokens: prompt, completion_tokens: completion } = usage as Record<string, unknown>;
  return { promptTokens: count(prompt), completionTokens: count(completion) };
}

function skipSpace(text: string, at: number): number {
  while (at < text.length && (text[at] === ' ' || text[at] === '\t' || text[at] === '\n' || text[at] === '\r')) at += 1;
  return at;
}
