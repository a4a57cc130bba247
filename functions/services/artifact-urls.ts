import type { Assignment } from '../../shared/contracts/desired.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import { ApiError } from '../kernel/errors.js';
import { servesFiles, type ArtifactStore } from '../kernel/ports/artifact-store.js';

/**
 * The assignments as the machine receives them: every file of a registry version gets a short-lived GET URL from
 * the artifact store, and the version its `urlsExpireAt` (epoch seconds). Made while the desired state is signed,
 * and nowhere else: the stored spec holds the URLs empty, as it holds secrets by reference. The URLs outlive the
 * signed state (`artifactUrlTtlMs` > `desiredTtlMs`), and every re-signing hands out fresh ones, so an agent with
 * an unexpired state never holds dead URLs.
 *
 * A version with no store to serve it from (Workers have none) fails the signing: an assignment whose files the
 * agent cannot fetch must not be handed out as if it could run.
 */
export async function withArtifactUrls({
  ctx,
  input,
}: {
  ctx: { config: Pick<ControlPlaneConfig, 'artifactUrlTtlMs'>; artifacts?: ArtifactStore };
  input: { workspaceId: string; specs: readonly Assignment[]; nowMs?: number };
}): Promise<Assignment[]> {
  const store = ctx.artifacts;
  const expiresAt = Math.floor((input.nowMs ?? Date.now()) / 1000) + Math.floor(ctx.config.artifactUrlTtlMs / 1000);
  return await Promise.all(
    input.specs.map(async (spec) => {
      const { version } = spec;
      if (!version) return spec;
      if (!servesFiles(store)) {
        throw new ApiError(
          'unavailable',
          `assignment ${spec.assignmentId} runs ${version.model} ${version.version} from the model registry, but this control plane has no artifact store to serve its files from`,
        );
      }
      const folder = { workspaceId: input.workspaceId, model: version.model, version: version.version };
      const files = await Promise.all(version.files.map(async (file) => ({ ...file, url: await store.fileUrl(folder, file.path, expiresAt) })));
      return { ...spec, version: { ...version, files, urlsExpireAt: expiresAt } };
    }),
  );
}
