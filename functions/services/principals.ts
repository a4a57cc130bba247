import type { Role } from '../../shared/contracts/common.js';

/** An authenticated API token holder. */
export interface Actor {
  tokenId: string;
  workspaceId: string;
  role: Role;
}

/** An authenticated machine (agent request). */
export interface MachinePrincipal {
  machineId: string;
  workspaceId: string;
  credentialId: string;
  /** When the credential that signed the request expires: a long-lived uplink it opened closes then. */
  credentialExpiresAt: Date;
}
