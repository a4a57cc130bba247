/** A stream that says when its buffer emptied (`drain`) or it went away (`close`): Node's writables. */
interface Drainable {
  on(event: 'drain' | 'close', listener: () => void): unknown;
  off(event: 'drain' | 'close', listener: () => void): unknown;
}

/** Settles once `stream` drained or closed: what a writer told to wait (a false `write`) waits for. */
export function drained(stream: Drainable): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}
