import { createHmac, timingSafeEqual } from 'node:crypto';
import { isId } from '../../../shared/ids.js';
import { manifestPathProblem } from '../../../shared/manifest.js';
import { ModelName, VersionLabel } from '../../../shared/contracts/registry.js';
import { fileKey, type VersionFolder } from '../../kernel/ports/artifact-store.js';

/**
 * The local store's signed URLs (docs/artifacts.md, "URLs"):
 * `<public URL>/artifacts/v1/<workspace>/<model>/<version>/<path>?exp=<epoch s>&sig=<hex HMAC-SHA256>`. The
 * signature is the whole authorisation: it covers the file's whole key and the expiry, so no part of either can
 * be changed without the key. This file is the pure core; `functions/api/http/artifact-files.ts` serves them.
 */
export const LOCAL_FILES_PREFIX = '/artifacts/v1';

const SIG = /^[0-9a-f]{64}$/;
const EXP = /^[0-9]{1,12}$/;

/** The signature of one file's key until `exp`: the newline keeps a key ending in digits apart from the expiry. */
export function signFile(key: string, file: string, exp: number): string {
  return createHmac('sha256', key).update(`artifact-file:${file}\n${exp}`).digest('hex');
}

/** The URL of one file of a version, valid until `exp` (epoch seconds). Each segment is percent-encoded. */
export function localFileUrl(input: { baseUrl: string; key: string; folder: VersionFolder; path: string; exp: number }): string {
  const file = fileKey(input.folder, input.path);
  const encoded = file.split('/').map(encodeURIComponent).join('/');
  return `${input.baseUrl.replace(/\/+$/, '')}${LOCAL_FILES_PREFIX}/${encoded}?exp=${input.exp}&sig=${signFile(input.key, file, input.exp)}`;
}

/** What a request's path names: the version's folder and the file's path in it, or why it names none (a 400). */
export type ParsedFile = { ok: true; folder: VersionFolder; path: string; file: string } | { ok: false; problem: string };

/**
 * Reads `<workspace>/<model>/<version>/<path...>` from the raw (still percent-encoded) path after the prefix. The
 * file's path must keep the manifest's own rules, so that no spelling of `..` or of an absolute path reaches the
 * file system, whatever the signature says.
 */
export function parseFilePath(raw: string): ParsedFile {
  let segments: string[];
  try {
    segments = raw.split('/').map(decodeURIComponent);
  } catch {
    return { ok: false, problem: 'the path is not valid percent-encoding' };
  }
  if (segments.length < 4) return { ok: false, problem: 'the path names no file: <workspace>/<model>/<version>/<path>' };
  const [workspaceId, model, version, ...rest] = segments as [string, string, string, ...string[]];
  if (!isId('workspace', workspaceId)) return { ok: false, problem: 'the path does not start with a workspace id' };
  if (!ModelName.safeParse(model).success) return { ok: false, problem: 'the path does not name a model' };
  if (!VersionLabel.safeParse(version).success) return { ok: false, problem: 'the path does not name a version' };
  const path = rest.join('/');
  const problem = manifestPathProblem(path);
  if (problem) return { ok: false, problem };
  const folder = { workspaceId, model, version };
  return { ok: true, folder, path, file: fileKey(folder, path) };
}

/** Whether `exp` and `sig` of a request authorise reading `file` at `nowS` (epoch seconds). */
export function checkSignature(input: {
  key: string;
  file: string;
  exp: string | undefined;
  sig: string | undefined;
  nowS: number;
}): 'ok' | 'expired' | 'bad_signature' {
  const { exp, sig } = input;
  if (exp === undefined || sig === undefined || !EXP.test(exp) || !SIG.test(sig)) return 'bad_signature';
  const expected = Buffer.from(signFile(input.key, input.file, Number(exp)), 'hex');
  // Checked before the expiry, so that an expired answer is only ever given for a URL this plane did sign.
  if (!timingSafeEqual(expected, Buffer.from(sig, 'hex'))) return 'bad_signature';
  return Number(exp) < input.nowS ? 'expired' : 'ok';
}
