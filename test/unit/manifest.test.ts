import { describe, expect, it } from 'vitest';
import { duplicatePaths, manifestPathProblem } from '../../shared/manifest.js';
import { Manifest, MANIFEST_FILES_MAX } from '../../shared/contracts/registry.js';
import { compareFile } from '../../functions/kernel/ports/artifact-store.js';

const DIGEST = 'a'.repeat(64);
const file = (path: string, size = 1, sha256 = DIGEST) => ({ path, size, sha256 });

describe('manifest paths', () => {
  it('accepts relative, slash-separated paths inside the folder', () => {
    for (const path of [
      'config.json',
      'model-00001-of-00002.safetensors',
      'tokenizer/vocab.json',
      'a/b/c/d.bin',
      '.gitattributes',
      'a..b',
      'naïve.txt',
      'x'.repeat(255),
    ]) {
      expect(manifestPathProblem(path), path).toBeNull();
    }
  });

  it.each([
    ['../etc/passwd', "'..' segment"],
    ['weights/../../x', "'..' segment"],
    ['..', "'..' segment"],
    ['./config.json', "'.' segment"],
    ['/etc/passwd', "no leading '/'"],
    ['weights\\model.bin', 'backslash'],
    ['..\\..\\windows', 'backslash'],
    ['a//b', 'empty segment'],
    ['a/', 'empty segment'],
    ['', 'empty'],
    ['a\u0000b', 'control characters'],
    ['a\nb', 'control characters'],
    ['a\u007fb', 'control characters'],
    ['x'.repeat(256), 'at most 255 bytes'],
    ['é'.repeat(128), 'at most 255 bytes'],
    [`${'a/'.repeat(600)}x`, 'at most 1024 characters'],
  ])('refuses %j (%s)', (path, problem) => {
    expect(manifestPathProblem(path)).toContain(problem);
  });

  it('finds paths named twice, case-sensitively', () => {
    expect(duplicatePaths(['a', 'b', 'a', 'A', 'b', 'a'])).toEqual(['a', 'b']);
    expect(duplicatePaths(['Model.bin', 'model.bin'])).toEqual([]);
  });
});

describe('the Manifest contract', () => {
  const problems = (value: unknown) => {
    const parsed = Manifest.safeParse(value);
    return parsed.success ? [] : parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`);
  };

  it('accepts a Hugging Face-style folder', () => {
    expect(problems({ files: [file('config.json', 700), file('model.safetensors', 2 ** 34), file('tokenizer/tokenizer.json', 0)] })).toEqual([]);
  });

  it('refuses traversal, absolute paths, backslashes and duplicates, naming the file', () => {
    expect(problems({ files: [file('ok.json'), file('../escape')] })).toEqual(["files.1.path: a path must not have a '..' segment"]);
    expect(problems({ files: [file('/abs')] })[0]).toMatch(/^files\.0\.path: .*leading '\/'/);
    expect(problems({ files: [file('a\\b')] })[0]).toMatch(/^files\.0\.path: .*backslash/);
    expect(problems({ files: [file('a.bin'), file('a.bin')] })).toEqual(['files: paths must not repeat: a.bin']);
  });

  it('refuses bad digests and sizes', () => {
    for (const sha256 of ['A'.repeat(64), 'a'.repeat(63), 'a'.repeat(65), 'g'.repeat(64), '', `sha256:${'a'.repeat(64)}`]) {
      expect(problems({ files: [file('x', 1, sha256)] }), sha256).toEqual(['files.0.sha256: a SHA-256 digest: 64 lowercase hexadecimal characters']);
    }
    for (const size of [-1, 1.5, 2 ** 53, Number.NaN, '1']) expect(problems({ files: [file('x', size as number)] }).length, String(size)).toBeGreaterThan(0);
  });

  it('holds between one and MANIFEST_FILES_MAX files', () => {
    expect(problems({ files: [] }).length).toBe(1);
    const many = Array.from({ length: MANIFEST_FILES_MAX + 1 }, (_, i) => file(`shard-${i}.bin`));
    expect(problems({ files: many }).length).toBeGreaterThan(0);
    expect(problems({ files: many.slice(0, MANIFEST_FILES_MAX) })).toEqual([]);
  });
});

describe('compareFile', () => {
  it('names a size or digest mismatch, and nothing when both match', () => {
    expect(compareFile(file('w', 3), { size: 3, sha256: DIGEST })).toBeNull();
    expect(compareFile(file('w', 3), { size: 4, sha256: DIGEST })).toMatchObject({ path: 'w', problem: 'size_mismatch', expectedSize: 3, actualSize: 4 });
    expect(compareFile(file('w', 3), { size: 3, sha256: 'b'.repeat(64) })).toMatchObject({ problem: 'digest_mismatch', actualSha256: 'b'.repeat(64) });
  });
});
