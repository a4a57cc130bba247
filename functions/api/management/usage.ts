import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { toCsv } from '../../../shared/csv.js';
import { USAGE_COLUMNS, UsageReport } from '../../../shared/contracts/usage.js';
import { usageQuery, usageReport, usageRetention, USAGE_DEFAULT_DAYS, USAGE_MAX_DAYS } from '../../services/usage.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';

const CSV_TYPE = 'text/csv; charset=utf-8';

const report = guarded('viewer', {
  method: 'get',
  path: '/usage',
  summary: "The workspace's inference requests and their prompt and completion tokens, per UTC day, API token and model",
  request: {
    query: z.object({
      from: z
        .string()
        .optional()
        .openapi({ param: { description: `First day (YYYY-MM-DD, UTC); ${USAGE_DEFAULT_DAYS} days before \`to\` by default` } }),
      to: z
        .string()
        .optional()
        .openapi({ param: { description: `Last day (YYYY-MM-DD, UTC), included; today by default. At most ${USAGE_MAX_DAYS} days from \`from\`` } }),
      groupBy: z
        .string()
        .optional()
        .openapi({ param: { description: 'Comma-separated dimensions: `day`, `token`, `model` (all three by default)' } }),
      format: z
        .enum(['json', 'csv'])
        .optional()
        .openapi({ param: { description: '`csv` answers CSV with a header row (as does `Accept: text/csv`)' } }),
    }),
  },
  responses: {
    200: {
      description: 'Usage rows, ordered by day, token and model, and the retention window they come from (requests are kept `retentionDays`)',
      content: { 'application/json': { schema: UsageReport }, 'text/csv': { schema: z.string() } },
    },
    ...errorResponses(400, 401, 403),
  },
});

export function registerUsage(app: OpenAPIHono<AppEnv>) {
  app.openapi(report, async (c) => {
    const ports = c.get('ports');
    const { format, ...asked } = c.req.valid('query');
    const now = new Date();
    const query = usageQuery(asked, now);
    // What this instance still holds behind (its last requests) is counted too.
    await ports.dataPlane.workloads.flush();
    const data = await usageReport({ ctx: serviceCtx(ports, c.get('actor').tokenId), input: { workspaceId: c.get('actor').workspaceId, ...query } });
    const csv = format === 'csv' || (format === undefined && /\btext\/csv\b/i.test(c.req.header('accept') ?? ''));
    if (!csv) return c.json({ ...query, ...usageRetention(ports.config.workloadRetentionDays, now), data }, 200);
    return c.body(toCsv(USAGE_COLUMNS, data), 200, {
      'content-type': CSV_TYPE,
      'content-disposition': `attachment; filename="usage-${query.from}-${query.to}.csv"`,
    });
  });
}
