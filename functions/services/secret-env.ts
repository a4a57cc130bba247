import { and, eq, inArray } from 'drizzle-orm';
import { runtimeSecrets } from '../store/schema/index.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { ApiError } from '../kernel/errors.js';
import type { ServiceCtx, ServicePorts } from './service-context.js';
import type { SecretEnvRefs } from '../core/registry/resolve.js';
import { secretAssociatedData } from '../core/registry/secret-box.js';
import { secretFeeds } from '../core/registry/resolve.js';
import { requireSecretBox } from './runtime-secrets.js';

/** An assignment as stored: the signed spec, plus the secrets its runtime's environment takes (by reference). */
export type StoredAssignment = Assignment & { secretEnv?: SecretEnvRefs };

/**
 * The assignments as the machine receives them: each runtime's environment gets the decrypted values of the
 * secrets it names, and only those (the references leave the spec). Decrypted here, while the desired state is
 * signed, and nowhere else: the stored spec, the API and the audit log only ever hold the references.
 *
 * A secret deleted since the spec was written (its deployment was retired meanwhile) is left out, and so is one whose
 * admin no longer lists the template and variable among its `feeds` (the deployment is held meanwhile, with the
 * reason, by the reconciler): a secret reaches only the variables its admin chose. One that does
 * not decrypt (another key is configured) fails the signing, naming both keys: running without it is not an
 * option the control plane may take for the runtime.
 */
export async function revealSecretEnv({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; specs: readonly StoredAssignment[] };
}): Promise<Assignment[]> {
  const names = [...new Set(input.specs.flatMap((spec) => Object.values(spec.secretEnv ?? {}).map((ref) => ref.secret)))];
  const strip = ({ secretEnv: _refs, ...spec }: StoredAssignment): Assignment => spec;
  if (names.length === 0) return input.specs.map(strip);
  const box = requireSecretBox(ctx.config);
  const rows = await ctx.db
    .select({ name: runtimeSecrets.name, sealed: runtimeSecrets.sealed, keyId: runtimeSecrets.keyId, feeds: runtimeSecrets.feeds })
    .from(runtimeSecrets)
    .where(and(eq(runtimeSecrets.workspaceId, input.workspaceId), inArray(runtimeSecrets.name, names)));
  const values = new Map<string, { value: string; feeds: (typeof rows)[number]['feeds'] }>();
  for (const row of rows) {
    const value = box.open(row.sealed, secretAssociatedData(input.workspaceId, row.name));
    if (value === null) {
      throw new ApiError(
        'unavailable',
        `runtime secret ${row.name} does not decrypt: it was sealed under key ${row.keyId}, this instance holds key ${box.keyId}`,
      );
    }
    values.set(row.name, { value, feeds: row.feeds });
  }
  return input.specs.map((stored) => {
    const spec = strip(stored);
    if (spec.runtime.kind !== 'template' || !stored.secretEnv) return spec;
    const env = { ...spec.runtime.env };
    for (const [name, ref] of Object.entries(stored.secretEnv)) {
      const secret = values.get(ref.secret);
      if (secret !== undefined && secretFeeds(secret.feeds, spec.runtime.template, name)) env[name] = secret.value;
    }
    return { ...spec, runtime: { ...spec.runtime, env } };
  });
}
