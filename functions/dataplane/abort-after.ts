/**
 * `AbortSignal.any([signal, AbortSignal.timeout(ms)])` that does fire: Node 20 lets a timeout signal that only
 * `any()` refers to be garbage-collected, and then it never aborts. The timer here holds it; `clear()` stops it.
 */
export function abortAfter(signal: AbortSignal, ms: number): { signal: AbortSignal; clear(): void } {
  const controller = new AbortController();
  const onAbort = () => controller.abort(signal.reason);
  // setTimeout fires at once past 2^31-1 ms; a deadline that far away is as good as none.
  const timer = setTimeout(() => controller.abort(new DOMException('The operation timed out.', 'TimeoutError')), Math.min(Math.max(1, ms), 2 ** 31 - 1));
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    },
  };
}
