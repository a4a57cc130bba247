import { TOKENS_CHANNEL, type Bus } from '../kernel/ports/bus.js';
import { batchedWrites, type BatchedWriteDeps } from '../store/batched-writes.js';
import { MachineAuthCache, writeJtis } from './machine-auth.js';
import { TokenCache } from './token-cache.js';

/** What one instance's services keep in memory between requests. */
export interface ServiceCaches {
  /** `/v1`'s memory of authenticated API tokens; null where no bus reaches this instance to revoke them (Workers). */
  tokens: TokenCache | null;
  /** The frame uploads' credential cache and replay fence, the fence written behind to the store. */
  machineAuth: MachineAuthCache;
}

/**
 * The caches of an instance's services. A request-scoped instance (a Workers isolate) hears no revocation, so it
 * keeps no token cache: it asks the store for every request.
 */
export function createServiceCaches(input: { bus: Bus; deps: () => BatchedWriteDeps; requestScoped?: boolean }): ServiceCaches {
  const tokens = input.requestScoped ? null : new TokenCache();
  if (tokens) input.bus.subscribe(TOKENS_CHANNEL, () => tokens.clear());
  return { tokens, machineAuth: new MachineAuthCache(batchedWrites(input.deps)('replay-fence entries', writeJtis)) };
}
