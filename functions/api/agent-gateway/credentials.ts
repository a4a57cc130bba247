import type { Hono } from 'hono';
import { parseJsonOr400, parseOr400 } from '../../kernel/errors.js';
import { RotateCredentialRequest, type RotateCredentialResponse } from '../../../shared/contracts/enrollment.js';
import { rotateMachineCredential } from '../../services/machines.js';
import { assertStrongEd25519Key } from '../../services/ed25519-key.js';
import { machineAuth } from '../http/machine-auth.js';
import { newId } from '../../../shared/ids.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';

/** POST /agent/v1/credentials: registers the machine's next key, signed with its current one. */
export function registerCredentials(app: Hono<AppEnv>) {
  app.post('/credentials', machineAuth, async (c) => {
    const ports = c.get('ports');
    const machine = c.get('machine');
    const input = parseOr400(RotateCredentialRequest, parseJsonOr400(c.get('rawBody')));
    assertStrongEd25519Key(input.publicKey);
    const rotated = await rotateMachineCredential({
      ctx: serviceCtx(ports, machine.machineId),
      input: { machineId: machine.machineId, workspaceId: machine.workspaceId, publicKey: input.publicKey, credentialId: newId('credential') },
    });
    const body: RotateCredentialResponse = { credentialId: rotated.credentialId, credentialExpiresAt: rotated.credentialExpiresAt.toISOString() };
    return c.json(body, 201);
  });
}
