import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRunFile } from '../../cli/commands/runs.js';

describe('readRunFile (runs submit -f)', () => {
  let dir: string;
  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lnx-run-file-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads {name, spec} from YAML, with the spec checked and its defaults filled', async () => {
    const run = await readRunFile(await file('run.yaml', 'name: train\nspec:\n  template: sim-job\n  workers: 4\n  gang: {}\n'));
    expect(run).toMatchObject({ name: 'train', spec: { template: 'sim-job', workers: 4, gang: { timeoutMs: 600_000 }, resources: { gpus: 1 } } });
  });

  it('takes what `runs show --json` printed: the view fields are dropped', async () => {
    const shown = { id: 'run_1', name: 'train', state: 'failed', workers: [], events: [], spec: { template: 'sim-job', workers: 1 } };
    expect((await readRunFile(await file('shown.json', JSON.stringify(shown)))).spec.workers).toBe(1);
  });

  it('refuses a field beside spec, and a spec out of bounds, naming it (exit 2)', async () => {
    await expect(readRunFile(await file('typo.yaml', 'name: x\npriority: 5\nspec: {template: sim-job, workers: 1}\n'))).rejects.toMatchObject({
      message: expect.stringMatching(/unknown field priority .*go under spec/),
      exitCode: 2,
    });
    await expect(readRunFile(await file('big.yaml', 'name: x\nspec: {template: sim-job, workers: 1, priority: 5000}\n'))).rejects.toMatchObject({
      message: expect.stringMatching(/priority must be at most 1000 at spec.priority/),
      exitCode: 2,
    });
  });
});
