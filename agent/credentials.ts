import type { CryptoKey } from 'jose';
import { RotateCredentialResponse } from '../shared/contracts/index.js';
import type { ServerClock } from './link/clock.js';
import type { MachineCredentials, SignedClient } from './link/http.js';
import type { Log } from './log.js';
import { generateMachineKey, promoteNextKey, saveIdentity, saveKey, type AgentIdentity } from './state.js';

/**
 * The machine's identity and the credential it signs with, rotated once two thirds of its lifetime have passed
 * (in the control plane's time): the next key is saved before it is sent, and promoted once the control plane
 * took it.
 */
export function createMachineCredentials(opts: { stateDir: string; identity: AgentIdentity; key: CryptoKey; clock: Pick<ServerClock, 'now'>; log: Log }) {
  let identity = opts.identity;
  let credentials: MachineCredentials = { machineId: identity.machineId, clusterId: identity.clusterId, credentialId: identity.credentialId, key: opts.key };
  return {
    identity: (): AgentIdentity => identity,
    current: (): MachineCredentials => credentials,
    async maybeRotate(client: Pick<SignedClient, 'request'>): Promise<void> {
      const { clock, stateDir, log } = opts;
      const issued = Date.parse(identity.credentialIssuedAt);
      const expires = Date.parse(identity.credentialExpiresAt);
      if (clock.now() < issued + ((expires - issued) * 2) / 3) return;
      const next = await generateMachineKey();
      await saveKey(stateDir, next.privateJwk, true);
      const result = await client.request('POST', '/agent/v1/credentials', { publicKey: next.publicJwk }, RotateCredentialResponse);
      if (!result.success) {
        log('credential rotation failed', { code: result.error.code });
        return;
      }
      await promoteNextKey(stateDir);
      identity = {
        ...identity,
        credentialId: result.data.credentialId,
        credentialIssuedAt: new Date(clock.now()).toISOString(),
        credentialExpiresAt: result.data.credentialExpiresAt,
      };
      await saveIdentity(stateDir, identity);
      credentials = { ...credentials, credentialId: result.data.credentialId, key: next.privateKey };
      log('credential rotated', { credentialId: result.data.credentialId, expiresAt: result.data.credentialExpiresAt });
    },
  };
}
