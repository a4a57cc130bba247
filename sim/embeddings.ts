import { createHash } from 'node:crypto';

const EMBEDDING_DIMS = 16;

export function embeddingFor(input: string): number[] {
  const digest = createHash('sha256').update(input).digest();
  const vec = new Array<number>(EMBEDDING_DIMS);
  let norm = 0;
  for (let i = 0; i < EMBEDDING_DIMS; i++) {
    const v = digest.readInt16LE(i * 2) / 32768;
    vec[i] = v;
    norm += v * v;
  }
  // Unit length so cosine similarity behaves like a real embedding model's output.
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < EMBEDDING_DIMS; i++) vec[i] = (vec[i] as number) * scale;
  return vec;
}

export function embeddingBase64(vec: number[]): string {
  const buf = Buffer.alloc(vec.length * 4);
  for (let i = 0; i < vec.length; i++) buf.writeFloatLE(vec[i] as number, i * 4);
  return buf.toString('base64');
}
