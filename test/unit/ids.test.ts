import { decodeTime } from 'ulid';
import { describe, expect, it } from 'vitest';
import { isId, newId } from '../../shared/ids.js';
import { sha256Base64Url, sha256Hex } from '../../shared/canonical.js';

describe('ids', () => {
  it('mints prefixed ULIDs that validate, carry the time, and do not repeat', () => {
    const before = Date.now();
    const id = newId('workload');
    expect(id).toMatch(/^wkl_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(isId('workload', id)).toBe(true);
    expect(isId('machine', id)).toBe(false);
    expect(decodeTime(id.slice(4))).toBeGreaterThanOrEqual(before);
    const many = new Set(Array.from({ length: 20_000 }, () => newId('invocation')));
    expect(many.size).toBe(20_000);
    // Every character position of the random part varies.
    const randomParts = [...many].map((value) => value.slice(4 + 10));
    for (let position = 0; position < 16; position += 1) expect(new Set(randomParts.map((r) => r[position])).size).toBe(32);
  });
});

describe('sha256', () => {
  it('matches the known digests of the empty string', async () => {
    expect(await sha256Hex('')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(await sha256Base64Url('')).toBe('47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU');
    expect(await sha256Hex(new TextEncoder().encode('abc'))).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });
});
