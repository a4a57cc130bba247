import { bodyLimit } from 'hono/body-limit';
import { ApiError } from '../errors.js';

/** Rejects bodies over `maxSize` bytes with 413 before they are buffered. */
export function limitBody(maxSize: number) {
  return bodyLimit({
    maxSize,
    onError: () => {
      throw new ApiError('payload_too_large', `request body exceeds ${maxSize} bytes`);
    },
  });
}
