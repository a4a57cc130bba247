import { createHash } from 'node:crypto';
import { canonicalize } from '../../../shared/canonical.js';
import type { Assignment } from '../../../shared/contracts/desired.js';

/** What makes a replica what it is; a change of any of these rolls the deployment. */
export type TemplateFields = Pick<Assignment, 'model' | 'runtime' | 'artifact' | 'resources' | 'version'>;

/**
 * Digest of a replica's template, compared canonically (RFC 8785), so key order never matters. Replica count,
 * selector, capacity, start-up and restart settings are not part of it: changing them restarts nothing. Of a
 * registry version only its id counts (moving an alias rolls the deployment), never its files' signed URLs, which
 * change with every signature; a replica without one hashes as it did before versions existed. That stays: stored
 * assignments and the agents running them hold these digests, and any other formula would restart every replica.
 */
export function templateHash(fields: TemplateFields): string {
  const { model, runtime, artifact, resources, version } = fields;
  return createHash('sha256')
    .update(canonicalize({ model, runtime, artifact, resources, versionId: version?.versionId }))
    .digest('hex');
}
