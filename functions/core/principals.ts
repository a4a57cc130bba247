import type { Role } from '../../shared/contracts/common.js';

/** An authenticated API token holder. */
export interface Actor {
  tokenId: string;
  workspaceId: string;
  role: Role;
  /** The models it may call on `/v1` (null: every model of its workspace), carried so `/v1` asks the store nothing more. */
  models: string[] | null;
  /** Its requests per minute across every instance (null: unlimited). */
  rateLimitPerMinute: number | null;
}

/** An authenticated machine (agent request). */
export interface MachinePrincipal {
  machineId: string;
  workspaceId: string;
  credentialId: string;
  /** When the credential that signed the request expires: a long-lived uplink it opened closes then. */
  credentialExpiresAt: Date;
}
