import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadHeldGen, saveHeldGen, writeFileAtomic } from '../../agent/state.js';

describe('state files', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-state-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('survives concurrent atomic writes of one file: each lands whole, none renames another away', async () => {
    const path = join(dir, 'desired-gen.json');
    const texts = Array.from({ length: 40 }, (_, i) => JSON.stringify({ gen: i, pad: 'x'.repeat(i * 100) }));
    await Promise.all(texts.map((text) => writeFileAtomic(path, text)));
    expect(texts).toContain(await readFile(path, 'utf8'));
    expect(await readdir(dir)).toEqual(['desired-gen.json']);
  });

  it('writes with the given mode and removes its temporary file when the write fails', async () => {
    const path = join(dir, 'key.jwk');
    await writeFileAtomic(path, 'secret');
    expect((await import('node:fs/promises').then((fs) => fs.stat(path))).mode & 0o777).toBe(0o600);
    await expect(writeFileAtomic(join(dir, 'missing', 'file'), 'x')).rejects.toThrow(/ENOENT/);
    expect(await readdir(dir)).toEqual(['key.jwk']);
  });

  it('keeps the held generation across restarts, two saves a millisecond apart included', async () => {
    expect(await loadHeldGen(dir)).toBe(0);
    const first = saveHeldGen(dir, 4);
    await new Promise((r) => setTimeout(r, 1));
    await Promise.all([first, saveHeldGen(dir, 5)]);
    expect(await loadHeldGen(dir)).toBe(5);
    expect(await readdir(dir)).toEqual(['desired-gen.json']);
  });
});
