import type { Server } from 'node:net';
import type { ControlPlaneConfig } from '../../kernel/config.js';

type Bounds = Pick<ControlPlaneConfig, 'headersTimeoutMs' | 'maxConnections'>;

/**
 * The options of `http.createServer` (or `https`) that bound a connection's headers, for every listener of the Node
 * control plane (the API and the peer channel): headers that trickle in are cut at `headersTimeoutMs` with 408,
 * checked this often (Node's default: every 30 s). The timeout counts from a request's first byte, never over an
 * idle keep-alive connection. Constructor options: the check's interval cannot be changed once the server exists.
 */
export function headerBounds(config: Bounds): { headersTimeout: number; connectionsCheckingInterval: number } {
  return { headersTimeout: config.headersTimeoutMs, connectionsCheckingInterval: Math.min(1_000, config.headersTimeoutMs) };
}

/** Past `maxConnections` open connections (0: no cap) a listener refuses a new one at once. */
export function capConnections(server: Server, config: Bounds): void {
  if (config.maxConnections > 0) server.maxConnections = config.maxConnections;
}
