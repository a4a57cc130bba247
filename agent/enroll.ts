import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { fetch } from 'undici';
import { canonicalize } from '../shared/canonical.js';
import { EnrollResponse } from '../shared/contracts/index.js';
import { collectInventory } from './inventory/index.js';
import { createServerClock } from './link/clock.js';
import { readResult } from './link/http.js';
import { unreachableMessage } from './link/reachability.js';
import { jsonLog, type Log } from './log.js';
import { proxyDispatcher } from './proxy.js';
import { ensureStateDir, generateMachineKey, loadIdentity, saveIdentity, saveKey, type AgentIdentity } from './state.js';
import { AGENT_VERSION } from './version.js';

/**
 * `lunanexa-agent enroll`: generates the machine key locally (0600, never sent), collects inventory and trades
 * the single-use enrollment token for a machine identity, pinning the control plane's JWKS.
 */
export async function enrollAgent(opts: {
  url: string;
  token: string;
  name?: string;
  stateDir: string;
  log?: Log;
  /** The nvidia-smi the inventory runs (LUNANEXA_AGENT_NVIDIA_SMI). */
  nvidiaSmi?: string;
}): Promise<AgentIdentity> {
  const stateDir = resolve(opts.stateDir);
  if (await loadIdentity(stateDir)) throw new Error(`${stateDir} already holds an enrolled identity`);
  await ensureStateDir(stateDir);
  const key = await generateMachineKey();
  const inventory = await collectInventory({ agentVersion: AGENT_VERSION, nvidiaSmi: opts.nvidiaSmi });
  const name =
    opts.name ??
    hostname()
      .toLowerCase()
      .replace(/[^a-z0-9-]/g, '-')
      .slice(0, 63);
  const dispatcher = proxyDispatcher();
  const response = await fetch(new URL('/agent/v1/enroll', opts.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    // No labels: a machine does not choose its own (they come with the enrollment token, or from an operator).
    body: canonicalize({ token: opts.token, name, publicKey: key.publicJwk, inventory }),
    // The body carries the token: a redirect (307 keeps the body) must never hand it to another server.
    redirect: 'manual',
    dispatcher,
  }).catch((error: unknown) => {
    throw new Error(unreachableMessage(opts.url, error), { cause: error });
  });
  const result = await readResult(response, EnrollResponse);
  if (!result.success) throw new Error(`enrollment failed: ${result.error.code}: ${result.error.message}`);
  // Enrollment signs nothing, but the operator setting the machine up is told of a wrong clock now, and the
  // credential's issue time is the control plane's, like its expiry.
  const clock = createServerClock({ baseUrl: opts.url, dispatcher, log: opts.log ?? jsonLog });
  await clock.measure('enrollment');
  await saveKey(stateDir, key.privateJwk);
  const identity: AgentIdentity = {
    url: opts.url,
    name,
    machineId: result.data.machineId,
    workspaceId: result.data.workspaceId,
    clusterId: result.data.clusterId,
    credentialId: result.data.credentialId,
    credentialIssuedAt: new Date(clock.now()).toISOString(),
    credentialExpiresAt: result.data.credentialExpiresAt,
    jwks: result.data.jwks,
    heartbeatIntervalMs: result.data.heartbeatIntervalMs,
  };
  await saveIdentity(stateDir, identity);
  return identity;
}
