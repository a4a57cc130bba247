import { ApiError } from '../kernel/errors.js';
import type { ArtifactStore, OpenedFile } from '../kernel/ports/artifact-store.js';
import type { Db } from '../store/db.js';
import { checkSignature, LOCAL_FILES_PREFIX, parseFilePath } from '../store/artifacts/local-urls.js';
import { artifactUrlKey } from './store-secrets.js';

/**
 * Opens the file a local artifact store's signed URL names (docs/artifacts.md): the signature is the authorisation,
 * so a URL that is not one this control plane signed, or has expired, is refused (403) before the store is touched.
 */
export async function openSignedArtifactFile(input: {
  owner: { store: { db: Db }; artifacts?: ArtifactStore };
  /** The URL's path, `/artifacts/v1/...` (`LOCAL_FILES_PREFIX`). */
  urlPath: string;
  exp: string | undefined;
  sig: string | undefined;
}): Promise<{ file: OpenedFile; path: string }> {
  const parsed = parseFilePath(input.urlPath.slice(LOCAL_FILES_PREFIX.length + 1));
  if (!parsed.ok) throw new ApiError('bad_request', `not an artifact file URL: ${parsed.problem}`);
  const store = input.owner.artifacts;
  if (!store?.open) throw new ApiError('not_found', 'this control plane serves no artifact files itself (its store hands out URLs of its own)');
  const signature = checkSignature({
    key: await artifactUrlKey(input.owner),
    file: parsed.file,
    exp: input.exp,
    sig: input.sig,
    nowS: Math.floor(Date.now() / 1000),
  });
  if (signature === 'bad_signature') throw new ApiError('forbidden', 'the URL is not one this control plane signed, or it was altered');
  if (signature === 'expired') throw new ApiError('forbidden', 'the URL has expired: the next desired state carries fresh ones');
  const file = await store.open(parsed.folder, parsed.path);
  if (!file) throw new ApiError('not_found', `${parsed.path} is not a file of ${parsed.folder.model} ${parsed.folder.version} in the artifact store`);
  return { file, path: parsed.path };
}
