import { z } from 'zod';
import { describeIssues, FLAG_TO_KEY, SimOptions, type FlagName, type SimServerOptions } from './options.js';

// Number('') and Number(' ') are 0, so numbers are matched by shape before conversion.
const numberArg = z
  .string()
  .trim()
  .regex(/^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/, { error: 'expected a number' })
  .transform(Number);

const cliSchema = z.object({
  port: numberArg.default(0),
  host: z.string().default('127.0.0.1'),
  model: z.string().optional(),
  ttftMs: numberArg.default(0),
  tokensPerSecond: z
    .union(
      [
        z
          .string()
          .regex(/^(inf|infinity)$/i)
          .transform(() => Number.POSITIVE_INFINITY),
        numberArg,
      ],
      {
        error: 'expected a number or "Infinity"',
      },
    )
    .default(0),
  loadMs: numberArg.default(0),
  memoryMiB: numberArg.default(0),
  failureRate: numberArg.default(0),
  maxSequences: numberArg.optional(),
  sharedTokensPerSecond: numberArg.optional(),
  instanceId: z.string().optional(),
  seed: numberArg.optional(),
});

/**
 * Parses sim-server command-line flags (without the node/script entries), accepting both
 * `--flag value` and `--flag=value`. Only `--model` is required; the rest default to a
 * zero-latency, never-failing server on a free port.
 * @throws Error naming the offending flag(s) on unknown, repeated, missing or invalid values.
 */
export function parseSimArgs(argv: string[]): SimServerOptions {
  const raw: Partial<Record<keyof SimServerOptions, string>> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (!arg.startsWith('--')) throw new Error(`invalid sim-server arguments: unexpected argument "${arg}"`);
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    if (!Object.hasOwn(FLAG_TO_KEY, flag)) {
      throw new Error(`invalid sim-server arguments: unknown flag ${flag} (known: ${Object.keys(FLAG_TO_KEY).join(' ')})`);
    }
    const key = FLAG_TO_KEY[flag as FlagName];
    let value: string | undefined;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith('--')) throw new Error(`invalid sim-server arguments: ${flag} needs a value`);
      i++;
    }
    if (raw[key] !== undefined) throw new Error(`invalid sim-server arguments: ${flag} given more than once`);
    raw[key] = value;
  }
  const shaped = cliSchema.safeParse(raw);
  if (!shaped.success) throw new Error(`invalid sim-server arguments: ${describeIssues(shaped.error.issues)}`);
  const checked = SimOptions.safeParse(shaped.data);
  if (!checked.success) throw new Error(`invalid sim-server arguments: ${describeIssues(checked.error.issues)}`);
  return checked.data;
}
