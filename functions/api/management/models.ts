import { z, type OpenAPIHono } from '@hono/zod-openapi';
import {
  ApprovalRequest,
  CreateModelRequest,
  DecisionRequest,
  PromoteRequest,
  PromotionResult,
  RollbackResult,
  ModelDetail,
  ModelName,
  ModelView,
  RecordEvaluationRequest,
  RecordProvenanceRequest,
  RegisterVersionRequest,
  VersionLabel,
  VersionView,
} from '../../../shared/contracts/registry.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { createModel, getModel, getVersion, listModels, registerVersion } from '../../services/models.js';
import { decideApproval, recordEvaluation, recordProvenance, verifyVersion } from '../../services/version-moves.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { keyset, PageQuery } from './paging.js';
import { guarded } from '../http/guarded.js';
import { BenchmarkRunView } from '../../../shared/contracts/benchmark.js';
import { listBenchmarkRuns } from '../../dataplane/canary-gate.js';
import { promoteVersion, releaseVersion, rollbackVersion } from '../../services/promotion.js';
import type { Context } from 'hono';

const ModelParam = z.object({ name: ModelName });
const VersionParam = z.object({ name: ModelName, version: VersionLabel });
const json = <T extends z.ZodType>(schema: T) => ({ content: { 'application/json': { schema } }, required: true });
const answer = <T extends z.ZodType>(description: string, schema: T) => ({ description, content: { 'application/json': { schema } } });

const list = guarded('viewer', {
  method: 'get',
  path: '/models',
  summary: "List the workspace's models, a page at a time by name",
  request: { query: PageQuery },
  responses: { 200: answer('Models', pageOf(ModelView)), ...errorResponses(400, 401, 403) },
});

const modelPages = keyset(ModelName, (m: ModelView) => m.name);

const create = guarded('operator', {
  method: 'post',
  path: '/models',
  summary: 'Create a model: a name its versions share. A name taken: 409',
  request: { body: json(CreateModelRequest) },
  responses: { 201: answer('Created', ModelView), ...errorResponses(400, 401, 403, 409, 413) },
});

const get = guarded('viewer', {
  method: 'get',
  path: '/models/{name}',
  summary: 'One model with its newest versions (state, files, bytes)',
  request: { params: ModelParam },
  responses: { 200: answer('Model', ModelDetail), ...errorResponses(400, 401, 403, 404) },
});

const register = guarded('operator', {
  method: 'post',
  path: '/models/{name}/versions',
  summary: 'Register a candidate version with its manifest (every file: relative path, size, SHA-256). A label taken: 409',
  request: { params: ModelParam, body: json(RegisterVersionRequest) },
  responses: { 201: answer('Registered (candidate)', VersionView), ...errorResponses(400, 401, 403, 404, 409, 413) },
});

const getOne = guarded('viewer', {
  method: 'get',
  path: '/models/{name}/versions/{version}',
  summary: 'One version: its manifest, licence, provenance, verification, evaluations and lifecycle state',
  request: { params: VersionParam },
  responses: { 200: answer('Version', VersionView), ...errorResponses(400, 401, 403, 404) },
});

/** The lifecycle moves (docs/registry.md): each answers the version as it now is, or 409 with the lifecycle's reason. */
const moved = { 200: answer('The version after the move', VersionView), ...errorResponses(400, 401, 403, 404, 409, 413) };
const stepPath = <S extends string>(step: S) => `/models/{name}/versions/{version}/${step}` as const;

const provenance = guarded('operator', {
  method: 'post',
  path: stepPath('provenance'),
  summary: "Record a candidate's licence and provenance: candidate -> documented",
  request: { params: VersionParam, body: json(RecordProvenanceRequest) },
  responses: moved,
});

const verify = guarded('operator', {
  method: 'post',
  path: stepPath('verify'),
  summary:
    "Verify every file of the version's folder in the local artifact store against its manifest (size and SHA-256): documented -> verified, or rejected with a per-file report. No local store (Workers): 409 no_artifact_store",
  request: { params: VersionParam },
  responses: moved,
});

const evaluate = guarded('operator', {
  method: 'post',
  path: stepPath('evaluations'),
  summary: "Record an evaluation suite's run: passed moves a verified version to evaluated, failed rejects it",
  request: { params: VersionParam, body: json(RecordEvaluationRequest) },
  responses: moved,
});

const approval = guarded('admin', {
  method: 'post',
  path: stepPath('approval'),
  summary: 'Approve an evaluated version, or reject it, with a reason (admin: a person decides, never the system)',
  request: { params: VersionParam, body: json(ApprovalRequest) },
  responses: moved,
});

const benchmarks = guarded('viewer', {
  method: 'get',
  path: stepPath('benchmarks'),
  summary:
    "The version's benchmark gate runs with their evidence (model, version, runtime, hardware, TTFT, inter-token latency, tokens/s, errors), newest first",
  request: { params: VersionParam },
  responses: { 200: answer('Gate runs', z.object({ items: z.array(BenchmarkRunView) })), ...errorResponses(400, 401, 403, 404) },
});

const promotion = guarded('admin', {
  method: 'post',
  path: stepPath('promotion'),
  summary: 'Promote a gated version (a person decides): the alias moves to it, its canaries end, and the deployments following the alias roll onto it',
  request: { params: VersionParam, body: json(PromoteRequest) },
  responses: { 200: answer('Promoted', PromotionResult), ...errorResponses(400, 401, 403, 404, 409, 413) },
});

const release = guarded('admin', {
  method: 'post',
  path: stepPath('release'),
  summary: 'Release a promoted version as stable after observing it',
  request: { params: VersionParam, body: json(DecisionRequest) },
  responses: moved,
});

const rollback = guarded('admin', {
  method: 'post',
  path: stepPath('rollback'),
  summary: 'Roll a version back (canary or later): every alias on it moves back one step, its canaries end; for good',
  request: { params: VersionParam, body: json(DecisionRequest) },
  responses: { 200: answer('Rolled back', RollbackResult), ...errorResponses(400, 401, 403, 404, 409, 413) },
});

/** A move that changes what deployments serve is reconciled and routed before the answer, as a deployment PUT is. */
async function settle(c: Context<AppEnv>): Promise<void> {
  const ports = c.get('ports');
  await ports.dataPlane.routing.refreshed();
}

export function registerModels(app: OpenAPIHono<AppEnv>) {
  app.openapi(benchmarks, async (c) => {
    const { name, version } = c.req.valid('param');
    const items = await listBenchmarkRuns({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    return c.json({ items }, 200);
  });
  app.openapi(promotion, async (c) => {
    const { name, version } = c.req.valid('param');
    const result = await promoteVersion({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    await settle(c);
    return c.json(result, 200);
  });
  app.openapi(release, async (c) => {
    const { name, version } = c.req.valid('param');
    const view = await releaseVersion({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    return c.json(view, 200);
  });
  app.openapi(rollback, async (c) => {
    const { name, version } = c.req.valid('param');
    const result = await rollbackVersion({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    await settle(c);
    return c.json(result, 200);
  });
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listModels({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: modelPages.after(cursor), limit },
    });
    return c.json(modelPages.page(page), 200);
  });
  app.openapi(create, async (c) => {
    const view = await createModel({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId },
    });
    return c.json(view, 201);
  });
  app.openapi(get, async (c) => {
    const detail = await getModel({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name },
    });
    return c.json(detail, 200);
  });
  app.openapi(register, async (c) => {
    const view = await registerVersion({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: c.req.valid('param').name },
    });
    return c.json(view, 201);
  });
  app.openapi(getOne, async (c) => {
    const { name, version } = c.req.valid('param');
    const view = await getVersion({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    return c.json(view, 200);
  });
  app.openapi(provenance, async (c) => {
    const { name, version } = c.req.valid('param');
    const view = await recordProvenance({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    return c.json(view, 200);
  });
  app.openapi(verify, async (c) => {
    const { name, version } = c.req.valid('param');
    const ctx = { ...serviceCtx(c.get('ports'), c.get('actor').tokenId), artifacts: c.get('ports').artifacts };
    const view = await verifyVersion({ ctx, input: { workspaceId: c.get('actor').workspaceId, model: name, version } });
    return c.json(view, 200);
  });
  app.openapi(evaluate, async (c) => {
    const { name, version } = c.req.valid('param');
    const view = await recordEvaluation({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    return c.json(view, 200);
  });
  app.openapi(approval, async (c) => {
    const { name, version } = c.req.valid('param');
    const view = await decideApproval({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, model: name, version },
    });
    return c.json(view, 200);
  });
}
