import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { runWalkthrough, stageLocally, type StageFiles, type WalkthroughResult } from '../../functions/hosts/dev/walkthrough.js';
import type { ControlPlaneConfig } from '../../functions/kernel/config.js';
import type { AuditPage } from '../../shared/contracts/audit.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { eq } from 'drizzle-orm';
import { deployments } from '../../functions/store/schema/index.js';
import { reconcileOnce } from '../../functions/controller/driver.js';
import { describePg } from '../helpers/pg.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

// The SDK warns once per process that its releases after January 2027 need Node 22; Node 20 runs these.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

interface Store {
  config: (plane: { dataDir: string }) => Partial<ControlPlaneConfig>;
  stage: (plane: TestPlane) => StageFiles;
  close: () => Promise<void>;
}

/** The local store: the control plane's own folder, served to the agents through its signed URLs. */
const localStore = async (): Promise<Store> => ({
  config: () => ({}),
  stage: (plane) => stageLocally(join(plane.dataDir, 'artifacts')),
  close: async () => {},
});

/** A real S3-compatible server (s3rver) on loopback: the control plane verifies there and presigns the agents' URLs. */
const s3Store = async (): Promise<Store> => {
  const dir = await mkdtemp(join(tmpdir(), 'lnx-s3-'));
  const server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true, configureBuckets: [{ name: 'models', configs: [] }] });
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  const credentials = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
  const uploader = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials });
  return {
    config: () => ({ artifactsS3: { bucket: 'models', endpoint, region: 'us-east-1', prefix: 'lifecycle', forcePathStyle: true, ...credentials } }),
    stage: () => async (version, files) => {
      for (const file of files) {
        await uploader.send(
          new PutObjectCommand({
            Bucket: 'models',
            Key: `lifecycle/${version.workspaceId}/${version.model}/${version.version}/${file.path}`,
            Body: file.bytes,
          }),
        );
      }
    },
    close: async () => {
      uploader.destroy();
      await server.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
};

/**
 * docs/walkthrough.md as a test: the whole model lifecycle through the management API on a plane with real agent
 * processes and simulated runtimes. The walkthrough checks each step itself; this checks what it returns and what
 * the nodes hold on disk.
 */
function lifecycleSuite(storeKind: StoreKind, makeStore: () => Promise<Store>, nodeCount: number) {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let store: Store;
  let result: WalkthroughResult;

  beforeAll(async () => {
    store = await makeStore();
    const dataDir = await mkdtemp(join(tmpdir(), 'lnx-life-'));
    plane = await startTestPlane({ store: storeKind, dataDir, config: { ...STEADY_LIVENESS, ...store.config({ dataDir }) } });
    nodes = await Promise.all(
      Array.from({ length: nodeCount }, (_, i) => startSimNode(plane, `dgx-${i + 1}`, join(plane.dataDir, 'nodes'), { telemetryMs: 30_000 })),
    );
    // The fleet as `npm start` shows it before anyone deploys: every node ready, so that placement can spread.
    await waitFor(
      async () => {
        const { data } = (await (await plane.admin('/api/v1/machines')).json()) as { data: Array<{ state: string }> };
        return data.length === nodeCount && data.every((m) => m.state === 'ready');
      },
      { timeoutMs: 30_000, what: 'every node ready' },
    );
    const lines: string[] = [];
    try {
      result = await runWalkthrough({
        url: plane.url,
        token: plane.adminToken,
        stage: store.stage(plane),
        suffix: storeKind,
        log: (line) => lines.push(line),
        waitMs: 60_000,
      });
    } finally {
      console.log(`[${storeKind}] walkthrough:\n  ${lines.join('\n  ')}`);
    }
  }, 240_000);
  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
    await store?.close();
  });

  it("sends the canary exactly its weight's share, each request answered by its set's version", () => {
    expect(result.canaryShare).toEqual({ canary: 5, total: 20 });
  });

  it('stores the gate run as evidence with what it ran on, and gates the version', async () => {
    const { run, version } = result.gate;
    expect(version.state).toBe('gated');
    expect(run.passed).toBe(true);
    expect(run.evidence).toMatchObject({
      evidenceVersion: 2,
      model: result.model,
      version: 'v2',
      versionId: result.versionIds.v2,
      requests: 12,
      errors: 0,
      failures: [],
    });
    expect(run.evidence.hardware).toHaveLength(1);
    expect(run.evidence.hardware[0]!.inventory).toMatchObject({ hostname: expect.any(String) });
    // What its node reported of its GPU by the gate's end (the simulated GB10's telemetry), not the enrollment's.
    expect(run.evidence.hardware[0]!.reported?.at(-1)?.gpus).toEqual([
      expect.objectContaining({ index: 0, utilizationPercent: expect.any(Number), temperatureC: expect.any(Number), powerDrawW: expect.any(Number) }),
    ]);
    expect(run.evidence.ttftMs.p50).toBeGreaterThan(0);
    expect(run.evidence.ttftMs.p99).toBeGreaterThanOrEqual(run.evidence.ttftMs.p50);
    expect(run.evidence.tokensPerSecond.perRequestP50).toBeGreaterThan(0);
    const listed = (await (await plane.admin(`/api/v1/models/${result.model}/versions/v2/benchmarks`)).json()) as { items: Array<{ id: string }> };
    expect(listed.items.map((r) => r.id)).toEqual([run.id]);
  });

  it('rolls the deployment onto the promoted version, and back onto v1 after the rollback', () => {
    expect(result.servedAfterPromotion).toEqual(Array(4).fill(result.versionIds.v2));
    expect(result.servedAfterRollback).toEqual(Array(4).fill(result.versionIds.v1));
  });

  it('moves the replicas off a drained node', () => {
    expect(result.drained.movedTo).not.toContain(result.drained.machine);
    expect(result.drained.movedTo.length).toBeGreaterThan(0);
  });

  it("leaves both versions verified in the nodes' caches, byte for byte", async () => {
    const folders: string[] = [];
    for (const node of nodes) {
      for (const id of Object.values(result.versionIds)) {
        const weights = join(`${node.stateDir}.cache`, 'versions', id, 'config.json');
        const text = await readFile(weights, 'utf8').catch(() => null);
        if (text !== null) folders.push(`${node.name}:${id}:${JSON.parse(text).label}`);
      }
    }
    expect(folders.some((f) => f.endsWith(`${result.model} v1`))).toBe(true);
    expect(folders.some((f) => f.endsWith(`${result.model} v2`))).toBe(true);
  });

  it.runIf(storeKind === 'pglite')(
    'wakes a deployment scaled to zero for the request that finds it asleep, holding the request until a replica serves',
    async () => {
      const spec = {
        model: 'sleepy',
        source: { kind: 'alias', alias: result.alias },
        runtime: { kind: 'simulated', model: 'sleepy', ttftMs: 5, tokensPerSecond: 0, loadMs: 800, memoryMiB: 64, failureRate: 0 },
        replicas: 1,
        memoryMiB: 64,
        scaleToZero: { idleSeconds: 600 },
      };
      expect((await plane.admin('/api/v1/deployments/sleepy', { method: 'PUT', body: JSON.stringify(spec) })).status).toBe(200);
      const detail = async () => (await (await plane.admin('/api/v1/deployments/sleepy')).json()) as DeploymentDetail;
      await waitFor(async () => ((await detail()).status.ready === 1 ? true : null), { timeoutMs: 30_000, what: 'sleepy to serve' });
      // What the controller's tick does after `idleSeconds` without a request (docs/scheduler.md), done at once here.
      await plane.systemCtx.db.update(deployments).set({ asleepSince: new Date() }).where(eq(deployments.name, 'sleepy'));
      await reconcileOnce({ ctx: { ...plane.systemCtx, config: plane.ports.config, bus: plane.ports.bus, metrics: plane.ports.metrics } });
      await waitFor(async () => ((await detail()).status.replicas.length === 0 ? true : null), { timeoutMs: 30_000, what: 'sleepy to stop its replica' });
      expect((await detail()).status.asleep).toBe(true);

      const started = performance.now();
      const response = await fetch(`${plane.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sleepy', messages: [{ role: 'user', content: 'wake up' }], max_tokens: 2 }),
      });
      expect(response.status, await response.clone().text()).toBe(200);
      // The replica's load alone takes 800 ms: the request was held while it started, not refused.
      expect(performance.now() - started).toBeGreaterThan(800);
      const after = await detail();
      expect(after.status.asleep).toBe(false);
      expect(after.status.ready).toBe(1);
      expect(after.events.map((e) => e.type)).toContain('woken');
      const page = (await (await plane.admin(`/api/v1/audit?action=deployment.wake`)).json()) as AuditPage;
      expect(page.data.map((e) => e.details)).toEqual([expect.objectContaining({ name: 'sleepy' })]);
    },
  );

  it('audits every decision with the token that took it', async () => {
    const page = (await (await plane.admin(`/api/v1/audit?limit=500`)).json()) as AuditPage;
    const actions = page.data.map((e) => e.action);
    for (const action of [
      'model_version.approve',
      'model_version.start_canary',
      'model_version.gate',
      'model_version.promote',
      'model_version.rollback',
      'model_alias.set',
      'model_alias.rollback',
      'deployment.canary_end',
    ]) {
      expect(actions, action).toContain(action);
    }
    const promote = page.data.find((e) => e.action === 'model_version.promote')!;
    expect(promote.actor).toMatch(/^tok_/);
  });
}

describe('the model lifecycle on the local artifact store (PGlite, two nodes)', () => lifecycleSuite('pglite', localStore, 2));
describePg('the model lifecycle on S3 (s3rver, PostgreSQL, two nodes)', () => lifecycleSuite('pg', s3Store, 2));
