/** Host memory as read from /proc/meminfo. */
export interface MeminfoSummary {
  totalMiB: number;
  /** Null on kernels older than 3.14, which do not report MemAvailable. */
  availableMiB: number | null;
}

function readKiB(text: string, key: string): number | null {
  const match = new RegExp(`^${key}:\\s*(\\d+)(?:\\s*kB)?\\s*$`, 'm').exec(text);
  return match ? Number(match[1]) : null;
}

/**
 * Parses the text of /proc/meminfo (values in kB) into whole MiB.
 *
 * @throws Error when MemTotal is missing, since the text is then not /proc/meminfo
 */
export function parseMeminfo(text: string): MeminfoSummary {
  const totalKiB = readKiB(text, 'MemTotal');
  if (totalKiB === null) throw new Error('/proc/meminfo has no MemTotal line');
  const availableKiB = readKiB(text, 'MemAvailable');
  return {
    totalMiB: Math.floor(totalKiB / 1024),
    availableMiB: availableKiB === null ? null : Math.floor(availableKiB / 1024),
  };
}
