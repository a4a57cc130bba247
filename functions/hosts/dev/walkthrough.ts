import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { DeploymentDetail } from '../../../shared/contracts/deployment.js';
import type { GateResult } from '../../../shared/contracts/benchmark.js';
import type { ManifestFile, PromotionResult, RollbackResult, VersionView } from '../../../shared/contracts/registry.js';

/** Puts a version's files where the control plane's artifact store reads them (a local folder, an S3 bucket). */
export type StageFiles = (
  version: { workspaceId: string; model: string; version: string },
  files: ReadonlyArray<{ path: string; bytes: Uint8Array }>,
) => Promise<void>;

/** Staging into the local store's layout (docs/artifacts.md): `<dir>/<workspace id>/<model>/<version>/<path>`. */
export const stageLocally =
  (artifactsDir: string): StageFiles =>
  async (version, files) => {
    for (const file of files) {
      const path = join(artifactsDir, version.workspaceId, version.model, version.version, file.path);
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, file.bytes);
    }
  };

export interface WalkthroughOptions {
  url: string;
  token: string;
  stage: StageFiles;
  /** Names are suffixed with this, so that the walkthrough can run again on the same fleet. */
  suffix: string;
  log: (line: string) => void;
  /** How long each wait may take (a rollout, a canary becoming ready). */
  waitMs?: number;
}

/** What the walkthrough saw, for a test to check beyond the walkthrough's own checks. */
export interface WalkthroughResult {
  model: string;
  alias: string;
  deployment: string;
  versionIds: { v1: string; v2: string };
  canaryShare: { canary: number; total: number };
  gate: GateResult;
  servedAfterPromotion: string[];
  servedAfterRollback: string[];
  drained: { machine: string; movedTo: string[] };
}

class WalkthroughError extends Error {}

/** A version's files, made up but deterministic: a config and 256 KiB of "weights" that differ per version. */
function versionFiles(label: string): Array<{ path: string; bytes: Uint8Array }> {
  const weights = new Uint8Array(256 * 1024);
  let block = createHash('sha256').update(label).digest();
  for (let at = 0; at < weights.length; at += block.length) {
    weights.set(block.subarray(0, Math.min(block.length, weights.length - at)), at);
    block = createHash('sha256').update(block).digest();
  }
  return [
    { path: 'config.json', bytes: new TextEncoder().encode(JSON.stringify({ architecture: 'simulated', label }, null, 2)) },
    { path: 'weights/model-00001-of-00001.safetensors', bytes: weights },
  ];
}

const manifestOf = (files: ReadonlyArray<{ path: string; bytes: Uint8Array }>): ManifestFile[] =>
  files.map((f) => ({ path: f.path, size: f.bytes.length, sha256: createHash('sha256').update(f.bytes).digest('hex') }));

/**
 * The model lifecycle of docs/walkthrough.md, end to end through the management API: register two versions whose
 * files sit in the artifact store, verify, evaluate and approve them, serve v1 through an alias, start v2 as a
 * canary on one node and watch its share of traffic, run its benchmark gate, promote it, roll it back, and drain a
 * node under the deployment. Every step checks what it expects and throws when the fleet does not do it.
 */
export async function runWalkthrough(opts: WalkthroughOptions): Promise<WalkthroughResult> {
  const waitMs = opts.waitMs ?? 90_000;
  const call = async <T>(method: string, path: string, body?: unknown, expect = 200): Promise<T> => {
    const response = await fetch(`${opts.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${opts.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (response.status !== expect) throw new WalkthroughError(`${method} ${path}: ${response.status} ${text}`);
    return (text ? JSON.parse(text) : undefined) as T;
  };
  const step = async <T>(what: string, work: () => Promise<T>, done: (value: T) => string = () => 'done'): Promise<T> => {
    const started = performance.now();
    const value = await work();
    opts.log(`${what}: ${done(value)} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
    return value;
  };
  const until = async <T>(what: string, check: () => Promise<T | null>): Promise<T> => {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const value = await check();
      if (value !== null) return value;
      if (Date.now() > deadline) throw new WalkthroughError(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  };

  const model = `walk-${opts.suffix}`;
  const alias = `${model}-default`;
  const deployment = model;
  const [workspace] = (await call<{ data: Array<{ id: string }> }>('GET', '/api/v1/workspaces')).data;
  if (!workspace) throw new WalkthroughError('the token sees no workspace');
  const versionPath = (version: string, step = '') => `/api/v1/models/${model}/versions/${version}${step ? `/${step}` : ''}`;
  const detail = () => call<DeploymentDetail>('GET', `/api/v1/deployments/${deployment}`);

  await step(`create model ${model}`, () => call('POST', '/api/v1/models', { name: model, description: 'the walkthrough model' }, 201));
  const registered: Record<string, VersionView> = {};
  for (const version of ['v1', 'v2']) {
    const files = versionFiles(`${model} ${version}`);
    registered[version] = await step(
      `stage and register ${version}`,
      async () => {
        await opts.stage({ workspaceId: workspace.id, model, version }, files);
        return await call<VersionView>(
          'POST',
          `/api/v1/models/${model}/versions`,
          { version, format: 'safetensors', manifest: { files: manifestOf(files) } },
          201,
        );
      },
      (v) => `${v.state}, ${v.fileCount} files, ${v.totalBytes} bytes`,
    );
  }
  /** Licence, provenance, digests, an evaluation and a person's approval: candidate -> approved. */
  const approve = async (version: string) => {
    await step(
      `${version}: licence and provenance`,
      () =>
        call<VersionView>('POST', versionPath(version, 'provenance'), {
          licence: 'Apache-2.0',
          provenance: { source: `walkthrough:${model}`, revision: version },
        }),
      (v) => v.state,
    );
    await step(
      `${version}: verify every file's digest in the store`,
      () => call<VersionView>('POST', versionPath(version, 'verify')),
      (v) => {
        if (!v.verification?.passed) throw new WalkthroughError(`${version} failed verification: ${JSON.stringify(v.verification?.problems)}`);
        return `${v.state}, ${v.verification.files} files, ${v.verification.bytes} bytes read`;
      },
    );
    await step(
      `${version}: evaluation suite`,
      () => call<VersionView>('POST', versionPath(version, 'evaluations'), { suite: 'walkthrough-smoke', passed: true, metrics: { accuracy: 0.71 } }),
      (v) => v.state,
    );
    await step(
      `${version}: approval`,
      () => call<VersionView>('POST', versionPath(version, 'approval'), { decision: 'approve', reason: 'walkthrough: evaluation passed' }),
      (v) => v.state,
    );
  };
  await approve('v1');
  await step(`alias ${alias} -> v1`, () => call('PUT', `/api/v1/aliases/${alias}`, { model, version: 'v1', reason: 'first release' }));

  const spec = (canary: unknown) => ({
    model: deployment,
    source: { kind: 'alias', alias },
    canary,
    runtime: { kind: 'simulated', model: deployment, ttftMs: 15, tokensPerSecond: 400, loadMs: 200, memoryMiB: 64, failureRate: 0 },
    replicas: 2,
    memoryMiB: 64,
    // Spread first, but two may share a machine (a drain on a small fleet still has room for them).
    replicasPerMachine: 2,
    maxConcurrency: 8,
    // The simulator loads in 200 ms: probing every 200 ms rather than every second shows it ready sooner.
    startup: { probeIntervalMs: 200 },
    // Both new replicas start at once on a rollout; the old ones drain only once the new ones serve.
    rollout: { maxSurge: 2, maxUnavailable: 0 },
  });
  /** Served replicas: every desired one current and serving, nothing left to retire. */
  const settled = (d: DeploymentDetail) =>
    d.status.rollout.state === 'complete' && d.status.ready === d.status.desired && d.status.replicas.every((r) => r.desired && r.current);
  await step(
    `deploy ${deployment} following ${alias}, 2 replicas`,
    async () => {
      await call('PUT', `/api/v1/deployments/${deployment}`, spec(null));
      return await until('the replicas to download v1 and serve', async () => {
        const d = await detail();
        return settled(d) ? d : null;
      });
    },
    (d) => `${d.status.ready} ready on ${[...new Set(d.status.replicas.map((r) => r.machineName))].join(', ')}`,
  );

  /** Sends `n` chat requests naming the alias; the versions and replica sets that answered, per request. */
  const send = async (n: number) => {
    const served: Array<{ versionId: string | null; track: string | null }> = [];
    for (let i = 0; i < n; i++) {
      const response = await fetch(`${opts.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${opts.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: alias, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }),
      });
      await response.text();
      if (response.status !== 200) throw new WalkthroughError(`request ${i + 1} of ${n} answered ${response.status}`);
      const id = response.headers.get('x-lunanexa-workload-id')!;
      const workload = await until(`workload ${id}'s record`, async () => {
        // Silent by design: polled until it succeeds; `until` fails with its own message when time runs out.
        const w = await call<{ state: string; versionId: string | null; track: string | null }>('GET', `/api/v1/workloads/${id}`).catch(() => null);
        return w && w.state === 'succeeded' ? w : null;
      });
      served.push({ versionId: workload.versionId, track: workload.track });
    }
    return served;
  };

  await approve('v2');
  await step(
    'canary v2 on one node, 25 % of requests',
    async () => {
      await call('PUT', `/api/v1/deployments/${deployment}`, spec({ version: 'v2', weight: 25, replicas: 1 }));
      return await until('the canary to serve', async () => {
        const d = await detail();
        return d.status.canary && d.status.canary.ready >= 1 && settled(d) ? d : null;
      });
    },
    (d) =>
      `v2 serving on ${d.status.replicas
        .filter((r) => r.track === 'canary')
        .map((r) => r.machineName)
        .join(', ')}`,
  );
  const traffic = await step(
    'send 20 requests naming the alias',
    () => send(20),
    (served) => `${served.filter((s) => s.track === 'canary').length} answered by the canary`,
  );
  const canaryShare = { canary: traffic.filter((s) => s.track === 'canary').length, total: traffic.length };
  if (traffic.some((s) => (s.track === 'canary' ? s.versionId !== registered.v2!.id : s.versionId !== registered.v1!.id)))
    throw new WalkthroughError('a request was answered by the wrong version for its replica set');

  const gate = await step(
    'benchmark gate on the canary',
    () =>
      call<GateResult>('POST', `/api/v1/deployments/${deployment}/canary/gate`, {
        name: 'walkthrough-smoke',
        requests: 12,
        concurrency: 4,
        maxTokens: 16,
        thresholds: { ttftP95Ms: 5_000, errorRateMax: 0 },
      }),
    (g) =>
      `${g.run.passed ? 'passed' : 'FAILED'}: TTFT p95 ${g.run.evidence.ttftMs.p95} ms, ${g.run.evidence.tokensPerSecond.perRequestP50} tokens/s per request, ${g.run.evidence.errors} errors; v2 is ${g.version.state}`,
  );
  if (!gate.run.passed) throw new WalkthroughError(`the gate failed: ${gate.run.evidence.failures.join('; ')}`);

  const servedBy = async (versionId: string, what: string) =>
    await step(
      what,
      async () => {
        await until(`every replica to serve ${versionId}`, async () => {
          const d = await detail();
          return settled(d) && !d.status.canary ? d : null;
        });
        return (await send(4)).map((s) => s.versionId!);
      },
      (ids) => `${ids.filter((id) => id === versionId).length} of ${ids.length} requests answered by ${versionId}`,
    );
  await step(
    'promote v2 (a person decides)',
    () => call<PromotionResult>('POST', versionPath('v2', 'promotion'), { alias, reason: 'gate passed, canary healthy' }),
    (r) => `v2 is ${r.version.state}; canary ended on ${r.endedCanaries.join(', ')}`,
  );
  const servedAfterPromotion = await servedBy(registered.v2!.id, 'the deployment rolls onto v2');
  await step(
    'roll v2 back',
    () => call<RollbackResult>('POST', versionPath('v2', 'rollback'), { reason: 'walkthrough: practising a rollback' }),
    (r) => `v2 is ${r.version.state}; ${r.aliases.join(', ')} moved back`,
  );
  const servedAfterRollback = await servedBy(registered.v1!.id, 'the deployment rolls back onto v1');

  const drained = await step(
    'drain a node under the deployment',
    async () => {
      const before = await detail();
      const victim = before.status.replicas[0]!;
      await call('POST', `/api/v1/machines/${victim.machineId}/drain`);
      const after = await until(`the replicas to leave ${victim.machineName}`, async () => {
        const d = await detail();
        return settled(d) && d.status.replicas.every((r) => r.machineId !== victim.machineId) ? d : null;
      });
      await call('POST', `/api/v1/machines/${victim.machineId}/uncordon`);
      return { machine: victim.machineName, movedTo: [...new Set(after.status.replicas.map((r) => r.machineName))] };
    },
    (d) => `replicas left ${d.machine}, now on ${d.movedTo.join(', ')} (${d.machine} uncordoned)`,
  );

  return {
    model,
    alias,
    deployment,
    versionIds: { v1: registered.v1!.id, v2: registered.v2!.id },
    canaryShare,
    gate,
    servedAfterPromotion,
    servedAfterRollback,
    drained,
  };
}
