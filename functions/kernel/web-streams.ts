/** A web stream read chunk by chunk (workerd's streams need not be async iterable). */
export function readAll(body: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  return readerChunks(body.getReader());
}

/** What `reader` reads, chunk by chunk; whoever holds the reader may still cancel it. */
export async function* readerChunks(reader: ReadableStreamDefaultReader<Uint8Array>): AsyncGenerator<Uint8Array> {
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    // Stops the body when the reader gives up early (a refused or oversized upload).
    // Silent by design: cancelling the body of a client that already left (or a stream already errored) can only fail.
    await reader.cancel().catch(() => {});
  }
}
