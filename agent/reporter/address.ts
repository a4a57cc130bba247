import type { NetworkInterfaceInfo } from 'node:os';

/**
 * The address the heartbeats give for this machine: the configured one (LUNANEXA_AGENT_ADDRESS), else the first
 * non-internal IPv4 of its interfaces (in the order the system lists them), else null. Pure.
 */
export function machineAddress(configured: string | undefined, interfaces: NodeJS.Dict<NetworkInterfaceInfo[]>): string | null {
  if (configured !== undefined) return configured;
  for (const addresses of Object.values(interfaces)) {
    const found = addresses?.find((address) => address.family === 'IPv4' && !address.internal);
    if (found) return found.address;
  }
  return null;
}
