import { Agent, request } from 'undici';

/** What one path answered over some requests; concatenable across rounds. */
export interface Sample {
  requests: number;
  ttft: number[];
  itl: number[];
  tokens: number;
  errors: number;
  wallMs: number;
}

export const emptySample = (): Sample => ({ requests: 0, ttft: [], itl: [], tokens: 0, errors: 0, wallMs: 0 });

export function addSample(total: Sample, s: Sample): void {
  total.requests += s.requests;
  for (const v of s.ttft) total.ttft.push(v);
  for (const v of s.itl) total.itl.push(v);
  total.tokens += s.tokens;
  total.errors += s.errors;
  total.wallMs += s.wallMs;
}

export interface Target {
  url: string;
  token: string | null;
  model: string;
  maxTokens: number;
}

/**
 * Why requests failed, per path and kind (an error code where the answer has one), with the first message of
 * each kind: a count alone says nothing.
 */
export const failures = new Map<string, Map<string, { count: number; example: string }>>();
function failed(path: string, sample: Sample, kind: string, example: string): void {
  sample.errors += 1;
  const byKind = failures.get(path) ?? new Map<string, { count: number; example: string }>();
  failures.set(path, byKind);
  const seen = byKind.get(kind);
  if (seen) seen.count += 1;
  else byKind.set(kind, { count: 1, example: example.slice(0, 300) });
}
const codeOf = (text: string) => /"code":"([^"]+)"/.exec(text)?.[1] ?? 'no code';

// Idle connections are dropped well before the servers' own 5 s keep-alive timeout: otherwise a path left
// idle while the others run is reused just as its server closes it ("other side closed"), a client race
// that says nothing about the path.
export const dispatcher = new Agent({ connections: 2048, keepAliveTimeout: 2_000, keepAliveMaxTimeout: 2_000 });
const TOKEN_MARK = '"content":"tok';

async function oneRequest(path: string, target: Target, body: string, sample: Sample): Promise<void> {
  const started = performance.now();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (target.token) headers.authorization = `Bearer ${target.token}`;
  sample.requests += 1;
  try {
    const response = await request(`${target.url}/v1/chat/completions`, { method: 'POST', headers, body, dispatcher });
    if (response.statusCode !== 200) {
      const text = await response.body.text();
      failed(path, sample, `HTTP ${response.statusCode} ${codeOf(text)}`, text);
      return;
    }
    let last = 0;
    let count = 0;
    let tail = '';
    let broken = false;
    for await (const chunk of response.body) {
      const now = performance.now();
      const text = tail + (chunk as Buffer).toString('latin1');
      let n = 0;
      for (let at = text.indexOf(TOKEN_MARK); at !== -1; at = text.indexOf(TOKEN_MARK, at + 1)) n += 1;
      tail = text.slice(-TOKEN_MARK.length);
      if (tail.includes('"')) tail = tail.slice(tail.indexOf('"'));
      else tail = '';
      if (n > 0) {
        if (count === 0) sample.ttft.push(now - started);
        else sample.itl.push(now - last);
        // Tokens that arrived in one read came together: no gap between them.
        for (let i = 1; i < n; i += 1) sample.itl.push(0);
        count += n;
        last = now;
      }
      const error = text.indexOf('{"error"');
      if (error !== -1 && !broken) {
        broken = true;
        failed(path, sample, `error event ${codeOf(text.slice(error))}`, text.slice(error));
      }
    }
    sample.tokens += count;
    if (count !== target.maxTokens && !broken) failed(path, sample, 'truncated stream', `${count} of ${target.maxTokens} tokens`);
  } catch (error) {
    const code = (error as { code?: string }).code;
    failed(path, sample, `client ${code ?? 'error'}`, error instanceof Error ? error.message : String(error));
  }
}

/** `requests` streamed chat completions, `concurrency` at a time, as fast as they complete. */
export async function window(path: string, target: Target, concurrency: number, requests: number): Promise<Sample> {
  const sample = emptySample();
  const body = JSON.stringify({ model: target.model, messages: [{ role: 'user', content: 'measure me' }], max_tokens: target.maxTokens, stream: true });
  let remaining = requests;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (remaining > 0) {
        remaining -= 1;
        await oneRequest(path, target, body, sample);
      }
    }),
  );
  sample.wallMs = performance.now() - started;
  return sample;
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
