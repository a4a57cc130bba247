import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { AuditOutcome, AuditPage, ChainVerdict, type AuditEntry } from '../../../shared/contracts/audit.js';
import { auditBatches, listAuditPage, verifyAuditChain } from '../../services/audit.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const NDJSON_TYPE = 'application/x-ndjson';

/** An exact value to filter by, in the shape such values have: a value of another shape matches nothing and is refused as a mistake. */
const filterValue = (shape: RegExp, what: string, description: string) =>
  z.string().max(256).regex(shape, `not ${what}`).optional().openapi({ param: { description } });
/** Objects by id or name (runtime templates and secrets); refused calls by their route (`access.denied`). */
const TARGET = /^([A-Za-z0-9][A-Za-z0-9._-]{0,127}|(GET|POST|PUT|DELETE) \/[\x21-\x7e]{1,200})$/;
const instant = (description: string) => z.iso.datetime({ offset: true }).optional().openapi({ param: { description } });

const list = guarded('admin', {
  method: 'get',
  path: '/audit',
  summary: "The workspace's audit log, newest first, a page at a time",
  request: {
    query: PageQuery.extend({
      action: filterValue(/^[a-z_]+(\.[a-z_-]+)+$/, 'an action name (noun.verb)', 'Only this action (`deployment.create`, `machine.revoke`, ...)'),
      actor: filterValue(
        /^(system|anonymous|[a-z]+_[0-9A-Z]{16,32})$/,
        'an actor (tok_..., mch_..., system)',
        'Only entries of this actor (`tok_...`, `mch_...`, `system`)',
      ),
      target: filterValue(
        TARGET,
        'an object id, a name or a route',
        'Only entries about this object (its id, or its name for runtime templates and secrets), or this route for `access.denied` (`POST /api/v1/tokens`)',
      ),
      outcome: AuditOutcome.optional().openapi({ param: { description: 'Only entries that ended so' } }),
      since: instant('Only entries at or after this time (ISO-8601 with its zone)'),
      until: instant('Only entries before this time (ISO-8601 with its zone)'),
    }),
  },
  responses: { 200: { description: 'Audit entries', content: { 'application/json': { schema: AuditPage } } }, ...errorResponses(400, 401, 403) },
});

const auditPages = keyset(z.number().int().positive(), (entry: AuditEntry) => entry.seq);

const exportChain = guarded('admin', {
  method: 'get',
  path: '/audit/export',
  summary: "The workspace's whole audit chain in seq order, one entry a line (JSON Lines), for offline verification",
  responses: { 200: { description: 'Audit entries, one JSON object a line', content: { [NDJSON_TYPE]: { schema: z.string() } } }, ...errorResponses(401, 403) },
});

const verify = guarded('admin', {
  method: 'get',
  path: '/audit/verify',
  summary: "Verifies the workspace's audit chain as stored: intact with its head hash, or where it breaks and why",
  responses: { 200: { description: 'The verdict', content: { 'application/json': { schema: ChainVerdict } } }, ...errorResponses(401, 403) },
});

export function registerAudit(app: OpenAPIHono<AppEnv>) {
  app.openapi(list, async (c) => {
    const ports = c.get('ports');
    const { limit, cursor, since, until, ...filter } = c.req.valid('query');
    const page = await listAuditPage({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: {
        workspaceId: c.get('actor').workspaceId,
        ...filter,
        ...(since === undefined ? {} : { since: new Date(since) }),
        ...(until === undefined ? {} : { until: new Date(until) }),
        after: auditPages.after(cursor),
        limit,
      },
    });
    return c.json(auditPages.page(page), 200);
  });
  // Declared for the document, served by a plain handler: the typed handlers of @hono/zod-openapi accept a
  // stream only for JSON and text/plain content, and JSON Lines is neither.
  const { middleware, ...documented } = exportChain;
  app.openAPIRegistry.registerPath(documented);
  app.get(exportChain.path, ...middleware, async (c) => {
    const workspaceId = c.get('actor').workspaceId;
    const batches = auditBatches({ ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId), input: { workspaceId } });
    // The first batch is read before answering: a store that is away is an error answer, not a cut body.
    let next: IteratorResult<AuditEntry[]> | null = await batches.next();
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const batch = next ?? (await batches.next());
        next = null;
        if (batch.done) controller.close();
        else controller.enqueue(encoder.encode(batch.value.map((entry) => `${JSON.stringify(entry)}\n`).join('')));
      },
      async cancel() {
        await batches.return(undefined);
      },
    });
    return c.body(body, 200, { 'content-type': NDJSON_TYPE, 'content-disposition': `attachment; filename="audit-${workspaceId}.jsonl"` });
  });
  app.openapi(verify, async (c) => {
    const verdict = await verifyAuditChain({ ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId), input: { workspaceId: c.get('actor').workspaceId } });
    return c.json(verdict, 200);
  });
}
