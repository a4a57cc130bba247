import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { runWalkthrough, type StageFiles } from './walkthrough.js';

/**
 * `npm run walkthrough`: the model lifecycle of docs/walkthrough.md against a running control plane (by default
 * `npm start`'s, with its admin token and its local artifact store). Set LUNANEXA_URL, LUNANEXA_TOKEN and
 * LUNANEXA_ARTIFACTS_DIR to point it elsewhere.
 */
const dataDir = resolve(process.env.LUNANEXA_DATA_DIR ?? '.lunanexa');
const url = process.env.LUNANEXA_URL ?? `http://127.0.0.1:${process.env.LUNANEXA_PORT ?? 8787}`;
const token = process.env.LUNANEXA_TOKEN ?? (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim();
const artifactsDir = resolve(process.env.LUNANEXA_ARTIFACTS_DIR ?? join(dataDir, 'artifacts'));

/** The local store's layout (docs/artifacts.md): `<dir>/<workspace id>/<model>/<version>/<path>`. */
const stage: StageFiles = async (version, files) => {
  for (const file of files) {
    const path = join(artifactsDir, version.workspaceId, version.model, version.version, file.path);
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, file.bytes);
  }
};

try {
  const result = await runWalkthrough({ url, token, stage, suffix: Date.now().toString(36).slice(-5), log: (line) => console.log(line) });
  console.log(`\ncanary share: ${result.canaryShare.canary} of ${result.canaryShare.total}; evidence ${result.gate.run.id}`);
} catch (error) {
  console.error(`walkthrough stopped: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
