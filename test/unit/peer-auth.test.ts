import { generateKeyPair } from 'jose';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { PeerAuth, type PeerRequest } from '../../functions/link/peer-auth.js';
import type { ControlPlaneIdentity } from '../../functions/services/identity.js';

const { privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
const identityWith = (peerKey: Uint8Array): (() => Promise<ControlPlaneIdentity>) => {
  const identity = { clusterId: 'cluster_test', signingKey: { kid: 'cpk_test', privateKey, peerKey }, jwks: { keys: [] } };
  return async () => identity;
};
const cluster = identityWith(crypto.getRandomValues(new Uint8Array(32)));
const request: PeerRequest = { method: 'POST', path: '/peer/v1/agent/uplink', machineId: 'mch_1' };

afterEach(() => vi.restoreAllMocks());

/** Peer tokens (functions/link/peer-auth.ts): seconds of life, clock skew tolerated, another cluster's refused. */
describe('peer tokens', () => {
  it('are refused past their lifetime and the tolerated clock skew, and from a clock too far ahead', async () => {
    const caller = new PeerAuth('instance_a', cluster);
    const callee = new PeerAuth('instance_b', cluster);
    const now = Date.now();
    const at = (ms: number) => vi.spyOn(Date, 'now').mockReturnValue(ms);

    at(now);
    const stale = await caller.header('instance_b', request);
    at(now + 9_000);
    const skewed = await caller.header('instance_b', request);
    at(now + 10_001);
    expect(await callee.verify(stale, request)).toBeNull();
    at(now);
    // Minted 9 s ahead of the callee's clock: more than the skew tolerated.
    expect(await callee.verify(skewed, request)).toBeNull();
    const fresh = await caller.header('instance_b', request);
    at(now + 9_000);
    expect(await callee.verify(fresh, request)).toMatchObject({ sub: 'instance_a', aud: 'instance_b' });
  });

  it("are another cluster's only where its key derives them", async () => {
    const other = new PeerAuth('instance_a', identityWith(crypto.getRandomValues(new Uint8Array(32))));
    const callee = new PeerAuth('instance_b', cluster);
    expect(await callee.verify(await other.header('instance_b', request), request)).toBeNull();
    expect(await callee.verify('Peer e30.AAAA', request)).toBeNull();
    expect(await callee.verify('Bearer x', request)).toBeNull();
  });
});
