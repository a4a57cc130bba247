import type { GpuDevice } from '../../shared/contracts/inventory.js';

/** Columns queried from nvidia-smi, in the order the parser expects them. */
export const NVIDIA_SMI_QUERY_FIELDS = [
  'index',
  'uuid',
  'name',
  'memory.total',
  'memory.used',
  'driver_version',
  'utilization.gpu',
  'temperature.gpu',
  'power.draw',
] as const;

/** Full argv (without the binary) whose output `parseNvidiaSmiCsv` understands. */
export const NVIDIA_SMI_ARGS: readonly string[] = [`--query-gpu=${NVIDIA_SMI_QUERY_FIELDS.join(',')}`, '--format=csv,noheader,nounits'];

type NumericKind = 'memory' | 'percent' | 'temperature' | 'power';

// Units nvidia-smi prints when `nounits` is dropped or ignored; memory is normalised to MiB.
const UNIT_FACTORS: Record<NumericKind, Record<string, number>> = {
  memory: { '': 1, mib: 1, gib: 1024, kib: 1 / 1024 },
  percent: { '': 1, '%': 1 },
  temperature: { '': 1, c: 1 },
  power: { '': 1, w: 1 },
};

/**
 * nvidia-smi writes every "no value" marker in brackets ([N/A], [Not Supported], [Unknown Error],
 * [Insufficient Permissions], [GPU is lost]); older drivers print a bare N/A.
 */
function isUnavailable(value: string): boolean {
  return value === '' || /^\[[^\]]*\]$/.test(value) || /^n\/a$/i.test(value);
}

// Only "not supported" / "N/A" on memory.total means shared memory; an error marker such as
// [Unknown Error] on a discrete card must not make it look like a GB10.
function isUnifiedMemoryMarker(value: string): boolean {
  return /^\[?(not supported|n\/a)\]?$/i.test(value);
}

function fail(lineNo: number, message: string): never {
  throw new Error(`nvidia-smi output line ${lineNo}: ${message}`);
}

function parseNumber(value: string, kind: NumericKind, field: string, lineNo: number): number | null {
  if (isUnavailable(value)) return null;
  const match = /^([+-]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$/.exec(value);
  const factor = match ? UNIT_FACTORS[kind][(match[2] ?? '').toLowerCase()] : undefined;
  if (!match || factor === undefined) fail(lineNo, `${field} "${value}" is not a number`);
  return Number(match[1]) * factor;
}

function parseText(value: string): string | null {
  return isUnavailable(value) ? null : value;
}

/**
 * Parses the CSV printed by `nvidia-smi` with {@link NVIDIA_SMI_ARGS}.
 *
 * Unavailable values become null. A row whose memory.total is not reported is a unified-memory
 * GPU (DGX Spark GB10): it gets `unifiedMemory: true` and null memory, which the caller fills in
 * from host memory.
 *
 * @param csv stdout of nvidia-smi
 * @returns one device per non-blank row, in output order
 * @throws Error naming the 1-based line number when a row has the wrong field count, a
 *   non-integer index or a non-numeric value in a numeric column
 */
export function parseNvidiaSmiCsv(csv: string): GpuDevice[] {
  const devices: GpuDevice[] = [];
  const lines = csv.split(/\r?\n/);
  let seenContent = false;
  for (const [i, rawLine] of lines.entries()) {
    const lineNo = i + 1;
    const line = rawLine.trim();
    if (line === '') continue;
    // nvidia-smi does not quote fields; GPU names contain spaces but no commas.
    const fields = line.split(',').map((f) => f.trim());
    // Tolerate a header row in case `noheader` was dropped from the command line.
    if (!seenContent && fields[0] === 'index') {
      seenContent = true;
      continue;
    }
    seenContent = true;
    if (fields.length !== NVIDIA_SMI_QUERY_FIELDS.length) {
      fail(lineNo, `expected ${NVIDIA_SMI_QUERY_FIELDS.length} fields, got ${fields.length}`);
    }
    const [index, uuid, name, memTotal, memUsed, driver, util, temp, power] = fields as [
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
      string,
    ];
    if (!/^\d+$/.test(index)) fail(lineNo, `index "${index}" is not a non-negative integer`);
    if (name === '') fail(lineNo, 'name is empty');

    const unifiedMemory = isUnifiedMemoryMarker(memTotal);
    devices.push({
      index: Number(index),
      uuid: parseText(uuid),
      name,
      memoryTotalMiB: parseNumber(memTotal, 'memory', 'memory.total', lineNo),
      // memory.used on a unified part is equally unreported; the caller derives it from the host.
      memoryUsedMiB: unifiedMemory ? null : parseNumber(memUsed, 'memory', 'memory.used', lineNo),
      unifiedMemory,
      driverVersion: parseText(driver),
      utilizationPercent: parseNumber(util, 'percent', 'utilization.gpu', lineNo),
      temperatureC: parseNumber(temp, 'temperature', 'temperature.gpu', lineNo),
      powerDrawW: parseNumber(power, 'power', 'power.draw', lineNo),
    });
  }
  return devices;
}
