import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

describe('the Node HTTP server', () => {
  let plane: TestPlane;
  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  it('keeps idle connections longer than the 60 s idle timeout of the balancers and clients in front', async () => {
    const response = await request(`${plane.url}/healthz`);
    await response.body.dump();
    expect(response.statusCode).toBe(200);
    // Node announces its idle timeout; clients close theirs first when it is longer than their own.
    expect(response.headers['keep-alive']).toBe('timeout=65');
  });
});
