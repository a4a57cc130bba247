import { generateKeyPair } from 'jose';
import { PeerAuth, type PeerRequest } from '../../functions/link/peer-auth.js';
import type { ControlPlaneIdentity } from '../../functions/services/identity.js';

/**
 * `npm run bench:peer-auth`: what the peer channel's authentication costs one forwarded request
 * (`functions/link/peer-auth.ts`): the caller mints a token for the request, the callee verifies it and fences its
 * id. BENCH_REQUESTS (20,000) requests one after another, after an unmeasured warm-up of a tenth of them; prints
 * microseconds per request.
 */
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 20_000);

const { privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519' });
const identity: ControlPlaneIdentity = {
  clusterId: 'cluster_bench',
  signingKey: { kid: 'cpk_bench', privateKey, peerKey: crypto.getRandomValues(new Uint8Array(32)) },
  jwks: { keys: [] },
};
const caller = new PeerAuth('instance_a', async () => identity);
const callee = new PeerAuth('instance_b', async () => identity);

async function one(i: number): Promise<void> {
  const request: PeerRequest = { method: 'POST', path: '/peer/v1/invoke', machineId: 'mch_01HBENCHMACHINE' };
  const header = await caller.header('instance_b', request, `inv_${i}`);
  if (!(await callee.verify(header, request))) throw new Error('a fresh token was refused');
}

for (let i = 0; i < REQUESTS / 10; i++) await one(i);
const started = process.hrtime.bigint();
for (let i = 0; i < REQUESTS; i++) await one(i);
const us = Number(process.hrtime.bigint() - started) / 1_000 / REQUESTS;
console.log(`peer auth: ${us.toFixed(1)} µs per request (mint + verify + fence), ${REQUESTS} requests, node ${process.version}`);
