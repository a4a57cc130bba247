import { z, type OpenAPIHono } from '@hono/zod-openapi';
import {
  AddMemberRequest,
  CreateWorkspaceRequest,
  MemberRemoved,
  MemberView,
  WorkspaceCreated,
  WorkspaceRunShare,
  WorkspaceView,
} from '../../../shared/contracts/tokens.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { isId } from '../../../shared/ids.js';
import { createWorkspace, listWorkspaces, setWorkspaceRunShare } from '../../services/workspaces.js';
import { addMember, listMembers, removeMember } from '../../services/members.js';
import { WorkspacePolicy } from '../../../shared/contracts/placement.js';
import { loadWorkspacePolicy, setWorkspacePolicy } from '../../services/workspace-policy.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { keyset, PageQuery } from './paging.js';
import { guarded } from '../http/guarded.js';

const list = guarded('viewer', {
  method: 'get',
  path: '/workspaces',
  summary: 'The workspaces the token may see, a page at a time by id: its own, or every one for an admin of the default workspace',
  request: { query: PageQuery },
  responses: { 200: { description: 'Workspaces', content: { 'application/json': { schema: pageOf(WorkspaceView) } } }, ...errorResponses(400, 401, 403) },
});

const workspacePages = keyset(
  z.string().refine((id) => isId('workspace', id)),
  (w: WorkspaceView) => w.id,
);

const create = guarded('admin', {
  method: 'post',
  path: '/workspaces',
  summary: 'Create a workspace (admins of the default workspace only); the answer holds its first admin token, shown once',
  request: { body: { content: { 'application/json': { schema: CreateWorkspaceRequest } }, required: true } },
  responses: {
    201: { description: 'Created', content: { 'application/json': { schema: WorkspaceCreated } } },
    ...errorResponses(400, 401, 403, 409, 413),
  },
});

const runShareRoute = guarded('admin', {
  method: 'put',
  path: '/workspaces/{id}/run-share',
  summary: "Set a workspace's fair-share weight and its runs' priority ceiling in the fleet's run queue (admins of the default workspace only)",
  request: {
    params: z.object({ id: z.string().refine((id) => isId('workspace', id), 'a workspace id (ws_...)') }),
    body: { content: { 'application/json': { schema: WorkspaceRunShare } }, required: true },
  },
  responses: {
    200: { description: 'The workspace now', content: { 'application/json': { schema: WorkspaceView } } },
    ...errorResponses(400, 401, 403, 404, 413),
  },
});

// Members are who may hold which credential: managed, and seen, by admins, as tokens are.
const listMembersRoute = guarded('admin', {
  method: 'get',
  path: '/workspaces/current/members',
  summary: "The token's workspace's members with their roles, a page at a time in the order they were added",
  request: { query: PageQuery },
  responses: { 200: { description: 'Members', content: { 'application/json': { schema: pageOf(MemberView) } } }, ...errorResponses(400, 401, 403) },
});

const memberPages = keyset(
  z.string().refine((id) => isId('member', id)),
  (m: MemberView) => m.id,
);

const addMemberRoute = guarded('admin', {
  method: 'post',
  path: '/workspaces/current/members',
  summary: "Add a member to the token's workspace: the highest role the tokens issued to them may carry",
  request: { body: { content: { 'application/json': { schema: AddMemberRequest } }, required: true } },
  responses: {
    201: { description: 'Added', content: { 'application/json': { schema: MemberView } } },
    ...errorResponses(400, 401, 403, 409, 413),
  },
});

const removeMemberRoute = guarded('admin', {
  method: 'delete',
  path: '/workspaces/current/members/{id}',
  summary: 'Remove a member: every token issued to them is revoked in the same change, and refused at once everywhere',
  request: { params: z.object({ id: z.string().min(1).max(64) }) },
  responses: { 200: { description: 'Removed', content: { 'application/json': { schema: MemberRemoved } } }, ...errorResponses(401, 403, 404, 409) },
});

const getPolicyRoute = guarded('viewer', {
  method: 'get',
  path: '/workspaces/current/policy',
  summary: "The token's workspace's placement policy: quota, data classes (machines and runtimes each may use) and licence rules",
  responses: { 200: { description: 'Policy', content: { 'application/json': { schema: WorkspacePolicy } } }, ...errorResponses(401, 403) },
});

const setPolicyRoute = guarded('admin', {
  method: 'put',
  path: '/workspaces/current/policy',
  summary: 'Replace the placement policy (audited); placed replicas stay, new placements follow it and unplaceable ones say which rule refuses them',
  request: { body: { content: { 'application/json': { schema: WorkspacePolicy } }, required: true } },
  responses: { 200: { description: 'The policy now', content: { 'application/json': { schema: WorkspacePolicy } } }, ...errorResponses(400, 401, 403, 413) },
});

export function registerWorkspaces(app: OpenAPIHono<AppEnv>) {
  app.openapi(getPolicyRoute, async (c) => c.json(await loadWorkspacePolicy(c.get('ports').store.db, c.get('actor').workspaceId), 200));
  app.openapi(setPolicyRoute, async (c) => {
    const ctx = serviceCtx(c.get('ports'), c.get('actor').tokenId);
    const policy = await setWorkspacePolicy({ ctx, input: { workspaceId: c.get('actor').workspaceId, policy: c.req.valid('json') } });
    return c.json(policy, 200);
  });
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listWorkspaces({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { actor: c.get('actor'), after: workspacePages.after(cursor), limit },
    });
    return c.json(workspacePages.page(page), 200);
  });
  app.openapi(create, async (c) => {
    const created = await createWorkspace({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { actor: c.get('actor'), name: c.req.valid('json').name },
    });
    return c.json(created, 201);
  });
  app.openapi(runShareRoute, async (c) => {
    const view = await setWorkspaceRunShare({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { actor: c.get('actor'), workspaceId: c.req.valid('param').id, share: c.req.valid('json') },
    });
    return c.json(view, 200);
  });
  app.openapi(listMembersRoute, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listMembers({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: memberPages.after(cursor), limit },
    });
    return c.json(memberPages.page(page), 200);
  });
  app.openapi(addMemberRoute, async (c) => {
    const member = await addMember({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId },
    });
    return c.json(member, 201);
  });
  app.openapi(removeMemberRoute, async (c) => {
    const removed = await removeMember({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, memberId: c.req.valid('param').id },
    });
    return c.json(removed, 200);
  });
}
