export type Log = (event: string, fields?: Record<string, unknown>) => void;

/** One JSON line per event on stderr; never payloads, never keys or tokens. */
export const jsonLog: Log = (event, fields = {}) => {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), event, ...fields })}\n`);
};
