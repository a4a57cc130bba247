import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { runWalkthrough, stageLocally } from './walkthrough.js';

/**
 * `npm run walkthrough`: the model lifecycle of docs/walkthrough.md against a running control plane (by default
 * `npm start`'s, with its admin token and its local artifact store). Set LUNANEXA_URL, LUNANEXA_TOKEN and
 * LUNANEXA_ARTIFACTS_DIR to point it elsewhere.
 */
const dataDir = resolve(process.env.LUNANEXA_DATA_DIR ?? '.lunanexa');
const url = process.env.LUNANEXA_URL ?? `http://127.0.0.1:${process.env.LUNANEXA_PORT ?? 8787}`;
const token = process.env.LUNANEXA_TOKEN ?? (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim();
const artifactsDir = resolve(process.env.LUNANEXA_ARTIFACTS_DIR ?? join(dataDir, 'artifacts'));

const stage = stageLocally(artifactsDir);

try {
  const result = await runWalkthrough({ url, token, stage, suffix: Date.now().toString(36).slice(-5), log: (line) => console.log(line) });
  console.log(`\ncanary share: ${result.canaryShare.canary} of ${result.canaryShare.total}; evidence ${result.gate.run.id}`);
} catch (error) {
  console.error(`walkthrough stopped: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
