import type { Db } from '../store/db.js';
import type { Jwks } from '../../shared/contracts/enrollment.js';
import { loadClusterId } from './cluster.js';
import { loadJwks, loadSigningKey, type SigningKey } from './signing-keys.js';

export interface ControlPlaneIdentity {
  clusterId: string;
  signingKey: SigningKey;
  jwks: Jwks;
}

/** Loads (creating on first start) the cluster id and signing key once per instance. */
export function createIdentityLoader(db: Db): () => Promise<ControlPlaneIdentity> {
  let pending: Promise<ControlPlaneIdentity> | undefined;
  return () => {
    pending ??= (async () => {
      const clusterId = await loadClusterId(db);
      const signingKey = await loadSigningKey(db);
      return { clusterId, signingKey, jwks: await loadJwks(db) };
    })().catch((error: unknown) => {
      pending = undefined;
      throw error;
    });
    return pending;
  };
}
