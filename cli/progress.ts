import { CliError } from './client.js';

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/**
 * Polls `check` until it says done, showing what it waits for on stderr: a spinner with the latest state on a
 * terminal, one line per change otherwise (so that CI logs stay readable). Stdout stays for the result. Runs out
 * after `timeoutMs` with exit code 3.
 */
export async function waitUntil(
  what: string,
  check: () => Promise<{ done: boolean; state: string }>,
  opts: { timeoutMs: number; intervalMs?: number },
): Promise<void> {
  const tty = process.stderr.isTTY === true;
  const deadline = Date.now() + opts.timeoutMs;
  let frame = 0;
  let shown = '';
  const show = (state: string) => {
    if (tty) {
      process.stderr.write(`\r\x1b[2K${FRAMES[frame++ % FRAMES.length]} ${what}: ${state}`);
    } else if (state !== shown) {
      process.stderr.write(`${what}: ${state}\n`);
    }
    shown = state;
  };
  try {
    for (;;) {
      const { done, state } = await check();
      show(state);
      if (done) return;
      if (Date.now() >= deadline)
        throw new CliError(`${what}: still not done after ${Math.round(opts.timeoutMs / 1000)} s (last: ${state}); it goes on server-side`, 3);
      await new Promise((resolve) => setTimeout(resolve, opts.intervalMs ?? 1_000));
    }
  } finally {
    if (tty) process.stderr.write('\n');
  }
}

/** `--timeout` in seconds as milliseconds, or exit 2. */
export function timeoutMs(seconds: string): number {
  const value = Number(seconds);
  if (!Number.isFinite(value) || value <= 0) throw new CliError(`--timeout must be a positive number of seconds, not ${seconds}`, 2);
  return value * 1000;
}
