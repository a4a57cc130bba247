import type { Actor } from '../core/principals.js';
import { TtlCache } from '../kernel/ttl-cache.js';

/** How long a successful lookup is reused when nothing says otherwise (no revocation signal reached us). */
const TOKEN_CACHE_MS = 2_000;

/** A token as the store found it: its holder, and how long it stays valid (null: no expiry). */
export interface FoundToken {
  actor: Actor;
  validForMs: number | null;
}

/**
 * The `/v1` hot path's memory of authenticated tokens on one long-lived instance, keyed by the token's hash (no
 * secret is held). A revocation anywhere reaches every instance over the bus and clears it (`clear`), and so does
 * a bus resync, since signals sent while the bus was away are lost; an entry never outlives its token's expiry.
 * A lookup that was under way when a revocation arrived is answered but not kept: it may have read the token
 * before the revocation committed, and must not make it live on. The Workers edge keeps no such cache: it has no
 * bus to its isolates (`createDataPlane`'s `requestScoped`).
 */
export class TokenCache {
  private readonly entries = new TtlCache<Actor>(TOKEN_CACHE_MS);
  /** Bumped by every clear: a lookup started under an older one is not kept. */
  private generation = 0;

  /** The holder of `hash`, from memory or else from `load` (null: no valid token has that hash). */
  async resolve(hash: string, load: () => Promise<FoundToken | null>): Promise<Actor | null> {
    const cached = this.entries.get(hash);
    if (cached) return cached;
    const generation = this.generation;
    const found = await load();
    if (found && generation === this.generation) this.entries.set(hash, found.actor, found.validForMs ?? TOKEN_CACHE_MS);
    return found?.actor ?? null;
  }

  /** Forgets every token: one was revoked (revocations are rare, so which one does not matter), or the bus resynced. */
  clear(): void {
    this.generation += 1;
    this.entries.clear();
  }
}
