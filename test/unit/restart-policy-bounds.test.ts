import { describe, expect, it } from 'vitest';
import { DeploymentSpec, MAX_RESTART_BACKOFF_MS, MAX_RESTARTS } from '../../shared/contracts/deployment.js';

/** A deployment's restart policy has bounds like every other value of its spec (400 past them). */
describe('restartPolicy bounds', () => {
  const spec = (restartPolicy: Record<string, unknown>) =>
    DeploymentSpec.safeParse({ model: 'm', runtime: { kind: 'simulated', model: 'm' }, replicas: 1, restartPolicy });

  it('accepts values up to the maxima', () => {
    expect(spec({ maxRestarts: MAX_RESTARTS, backoffMs: MAX_RESTART_BACKOFF_MS }).success).toBe(true);
    expect(spec({}).success).toBe(true);
  });

  it('refuses values past them, as the review sent them', () => {
    expect(spec({ maxRestarts: 99_999_999_999_999 }).success).toBe(false);
    expect(spec({ backoffMs: 99_999_999_999_999 }).success).toBe(false);
    expect(spec({ maxRestarts: MAX_RESTARTS + 1 }).success).toBe(false);
    expect(spec({ backoffMs: MAX_RESTART_BACKOFF_MS + 1 }).success).toBe(false);
  });
});
