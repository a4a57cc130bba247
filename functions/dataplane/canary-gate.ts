import { gpusReportedSince } from '../services/telemetry.js';
import { desc, eq } from 'drizzle-orm';
import { benchmarkRuns } from '../store/schema/index.js';
import { BENCHMARK_EVIDENCE_VERSION, type BenchmarkEvidence, type BenchmarkRunView, type WorkloadProfile } from '../../shared/contracts/benchmark.js';
import type { VersionView } from '../../shared/contracts/registry.js';
import { newId } from '../../shared/ids.js';
import { serviceCtx, type Ports } from './ports.js';
import { ApiError } from '../kernel/errors.js';
import { executeInference } from './execute.js';
import { loadFleetSnapshot } from '../services/fleet-load.js';
import type { Actor } from '../core/principals.js';
import { withTransaction, type ServiceCtx } from '../services/service-context.js';
import { judgeGate, TokenStreamReader, type GateObservation } from '../core/registry/gate-measure.js';
import { findVersion } from '../services/models.js';
import { canaryVersion, liveDeployment } from '../services/canary.js';
import { decide, moveVersion } from '../services/version-moves.js';

/** Each gate request's own deadline: a canary that cannot answer within it counts an error, not a hung gate. */
const REQUEST_DEADLINE_MS = 60_000;

/** One request of the profile, sent to the canary alone through the data plane (relay, node stream, runtime). */
async function observe(ports: Ports, actor: Actor, deployment: string, profile: WorkloadProfile): Promise<GateObservation> {
  const sent = performance.now();
  const since = () => performance.now() - sent;
  const result = await executeInference(ports, {
    actor,
    path: '/v1/chat/completions',
    kind: 'chat',
    model: deployment,
    body: {
      model: deployment,
      messages: [{ role: 'user', content: profile.prompt }],
      max_tokens: profile.maxTokens,
      stream: true,
      stream_options: { include_usage: true },
    },
    stream: true,
    deadline: Date.now() + REQUEST_DEADLINE_MS,
    idempotencyKey: null,
    signal: new AbortController().signal,
    startedAt: sent,
    track: 'canary',
  });
  if (!result.ok || result.status >= 400) return { ok: false, tokenAtMs: [], completionTokens: null, endMs: since() };
  const reader = new TokenStreamReader();
  if (result.kind === 'body') {
    reader.push(result.body, since());
    return { ok: true, tokenAtMs: reader.tokenAtMs, completionTokens: reader.completionTokens, endMs: since() };
  }
  return await new Promise<GateObservation>((resolve) => {
    const read = (chunks: readonly Uint8Array[]) => {
      const at = since();
      for (const chunk of chunks) reader.push(chunk, at);
    };
    result.pipe({
      write: async (chunks) => read(chunks),
      end: (chunks) => {
        read(chunks);
        resolve({ ok: true, tokenAtMs: reader.tokenAtMs, completionTokens: reader.completionTokens, endMs: since() });
      },
      fail: (chunks) => {
        read(chunks);
        resolve({ ok: false, tokenAtMs: reader.tokenAtMs, completionTokens: null, endMs: since() });
      },
      // The gate reads every byte at once: it never stays behind, but a cut would be a failed request.
      abandon: () => resolve({ ok: false, tokenAtMs: reader.tokenAtMs, completionTokens: null, endMs: since() }),
    });
  });
}

/** Runs `profile.requests` requests, at most `profile.concurrency` at once. */
async function runProfile(ports: Ports, actor: Actor, deployment: string, profile: WorkloadProfile): Promise<GateObservation[]> {
  const observations: GateObservation[] = [];
  let next = 0;
  const worker = async () => {
    while (next < profile.requests) {
      next += 1;
      observations.push(await observe(ports, actor, deployment, profile));
    }
  };
  await Promise.all(Array.from({ length: Math.min(profile.concurrency, profile.requests) }, worker));
  return observations;
}

const runView = (row: typeof benchmarkRuns.$inferSelect): BenchmarkRunView => ({
  id: row.id,
  profile: row.profile,
  passed: row.passed,
  evidence: row.evidence,
  createdBy: row.createdBy,
  createdAt: row.createdAt.toISOString(),
});

/**
 * The readiness and benchmark gate of a deployment's canary (docs/registry.md): the canary's version must be in
 * `canary` and every canary replica serving (else 409, nothing recorded); then the profile runs against the canary
 * alone through the data plane, and what it measured is stored as versioned evidence with the hardware and runtime
 * it ran on. Passed: the version moves to `gated`; failed: the lifecycle rejects it. Promotion stays a person's
 * decision either way.
 */
export async function runCanaryGate({
  ports,
  actor,
  input,
}: {
  ports: Ports;
  actor: Actor;
  input: { name: string; profile: WorkloadProfile };
}): Promise<{ run: BenchmarkRunView; version: VersionView }> {
  const ctx = serviceCtx(ports, actor.tokenId);
  const deployment = await liveDeployment(ctx, actor.workspaceId, input.name);
  const canary = await canaryVersion(ctx, deployment);
  // Refused before any request is sent when the lifecycle would refuse the gate anyway.
  decide(canary.row, { type: 'gate', passed: true, actor: actor.tokenId });

  await ports.dataPlane.routing.refreshed();
  const serving = (ports.dataPlane.routing.resolve(actor.workspaceId, deployment.name)?.replicas ?? []).filter(
    (r) => r.track === 'canary' && r.versionId === canary.row.id,
  );
  const wanted = deployment.canary!.replicas;
  if (serving.length < wanted)
    throw new ApiError('conflict', `the canary is not ready: ${serving.length} of ${wanted} replicas of ${canary.model} ${canary.row.version} serve`);

  const startedAt = new Date();
  const began = performance.now();
  const observations = await runProfile(ports, actor, deployment.name, input.profile);
  const measured = judgeGate(observations, input.profile, performance.now() - began);
  const servingMachines = new Set(serving.map((r) => r.machineId));
  const snapshot = await loadFleetSnapshot(ports.store.db, ports.config, { workspaceId: actor.workspaceId });
  const reported = await gpusReportedSince(ctx, [...servingMachines], startedAt);
  const evidence: BenchmarkEvidence = {
    evidenceVersion: BENCHMARK_EVIDENCE_VERSION,
    model: canary.model,
    version: canary.row.version,
    versionId: canary.row.id,
    deployment: deployment.name,
    runtime: deployment.runtime,
    hardware: snapshot.machines
      .filter((m) => servingMachines.has(m.id))
      .map((m) => ({
        machine: m.name,
        inventory: m.inventory,
        reported: [...(reported.get(m.id) ?? []), ...(m.gpus.length > 0 ? [{ at: new Date().toISOString(), gpus: m.gpus }] : [])],
      })),
    profile: input.profile,
    ...measured,
    startedAt: startedAt.toISOString(),
  };
  const passed = measured.failures.length === 0;
  return await withTransaction(ctx, async (tx: ServiceCtx) => {
    const row = await findVersion(tx, { workspaceId: actor.workspaceId, model: canary.model, version: canary.row.version, lock: true });
    const id = newId('run');
    const [stored] = await tx.db
      .insert(benchmarkRuns)
      .values({
        id,
        workspaceId: actor.workspaceId,
        versionId: row.id,
        deploymentId: deployment.id,
        profile: input.profile.name,
        evidenceVersion: BENCHMARK_EVIDENCE_VERSION,
        evidence,
        passed,
        createdBy: actor.tokenId,
      })
      .returning();
    const version = await moveVersion(
      tx,
      { workspaceId: actor.workspaceId, model: canary.model, version: row.version },
      row,
      { type: 'gate', passed, actor: actor.tokenId },
      {
        details: {
          run: id,
          profile: input.profile.name,
          passed,
          failures: measured.failures,
          ttftP95Ms: measured.ttftMs.p95,
          tokensPerSecond: measured.tokensPerSecond.perRequestP50,
        },
      },
    );
    return { run: runView(stored!), version };
  });
}

/** A version's gate runs, newest first (at most 100). */
export async function listBenchmarkRuns({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; model: string; version: string };
}): Promise<BenchmarkRunView[]> {
  const version = await findVersion(ctx, input);
  const rows = await ctx.db
    .select()
    .from(benchmarkRuns)
    .where(eq(benchmarkRuns.versionId, version.id))
    .orderBy(desc(benchmarkRuns.createdAt), desc(benchmarkRuns.id))
    .limit(100);
  return rows.map(runView);
}
