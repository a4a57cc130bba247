import { describe, expect, it } from 'vitest';
import { TokenCache, type FoundToken } from '../../functions/services/token-cache.js';

const found = (tokenId: string, validForMs: number | null = null): FoundToken => ({
  actor: { tokenId, workspaceId: 'ws_1', role: 'inference', models: null, rateLimitPerMinute: null },
  validForMs,
});

describe('TokenCache', () => {
  it('asks the store once, then answers from memory until cleared', async () => {
    const cache = new TokenCache();
    let loads = 0;
    const load = async () => {
      loads += 1;
      return found('tok_a');
    };
    expect((await cache.resolve('h', load))?.tokenId).toBe('tok_a');
    expect((await cache.resolve('h', load))?.tokenId).toBe('tok_a');
    expect(loads).toBe(1);
    cache.clear();
    await cache.resolve('h', load);
    expect(loads).toBe(2);
  });

  it('remembers no refusal: an unknown token is asked for again', async () => {
    const cache = new TokenCache();
    let loads = 0;
    const load = async () => {
      loads += 1;
      return null;
    };
    expect(await cache.resolve('h', load)).toBeNull();
    expect(await cache.resolve('h', load)).toBeNull();
    expect(loads).toBe(2);
  });

  it('does not keep a lookup that was under way when a revocation cleared it', async () => {
    const cache = new TokenCache();
    let release!: () => void;
    const slow = cache.resolve('h', () => new Promise<FoundToken>((resolve) => (release = () => resolve(found('tok_a')))));
    // The revocation lands while the lookup, which read the token before it committed, is still in flight.
    cache.clear();
    release();
    expect((await slow)?.tokenId).toBe('tok_a');
    let loads = 0;
    expect(
      await cache.resolve('h', async () => {
        loads += 1;
        return null;
      }),
    ).toBeNull();
    expect(loads).toBe(1);
  });

  it('keeps a token no longer than it is valid', async () => {
    const cache = new TokenCache();
    let loads = 0;
    const load = async () => {
      loads += 1;
      return found('tok_a', 20);
    };
    await cache.resolve('h', load);
    await cache.resolve('h', load);
    expect(loads).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 40));
    await cache.resolve('h', load);
    expect(loads).toBe(2);
  });
});
