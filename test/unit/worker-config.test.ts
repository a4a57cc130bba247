import { describe, expect, it } from 'vitest';
import { parseWorkerEnv } from '../../functions/hosts/worker-env.js';
import { edgeConfig } from '../../functions/hosts/worker-ports.js';

/** The Worker's settings from its bindings (functions/hosts/worker-env.ts), mapped as the Node entry maps its environment. */
describe('the Worker configuration', () => {
  const DATABASE_URL = 'postgres://u:p@db.example/db';
  const configOf = (vars: Record<string, string>) => {
    const parsed = parseWorkerEnv({ DATABASE_URL, ...vars });
    if (!parsed.ok) throw new Error(`refused: ${parsed.variables.join(', ')}`);
    return edgeConfig(parsed.env);
  };

  it("maps LUNANEXA_ADMISSION_TOKEN_SHARE to a token's share of a deployment's queue, and refuses one out of (0, 1]", () => {
    expect(configOf({}).admissionTokenShare).toBe(0.5);
    expect(configOf({ LUNANEXA_ADMISSION_TOKEN_SHARE: '0.25' }).admissionTokenShare).toBe(0.25);
    for (const share of ['0', '1.5', 'half']) {
      expect(parseWorkerEnv({ DATABASE_URL, LUNANEXA_ADMISSION_TOKEN_SHARE: share })).toMatchObject({
        ok: false,
        variables: ['LUNANEXA_ADMISSION_TOKEN_SHARE'],
      });
    }
  });
});
