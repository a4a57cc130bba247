import type { Metric } from 'prom-client';

/**
 * The label naming the workspace (its id) a series belongs to: inference series by their deployment's workspace,
 * node metrics by their machine's. A series without it describes the installation (every workspace together).
 */
export const WORKSPACE_LABEL = 'workspace';

/** A number as the exposition format writes it, as prom-client does. */
function sampleValue(value: number): string {
  if (Number.isNaN(value)) return 'Nan';
  if (!Number.isFinite(value)) return value < 0 ? '-Inf' : '+Inf';
  return `${value}`;
}

const escapeText = (text: string) => text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');

/**
 * The Prometheus text of `metrics` (those that carry `WORKSPACE_LABEL`) restricted to the series of one workspace,
 * each family with its HELP and TYPE: what a token of that workspace may scrape. Written line for line as the
 * registry writes the same series in the whole set.
 */
export async function workspaceExposition(metrics: Metric[], workspaceId: string): Promise<string> {
  const families: string[] = [];
  for (const metric of metrics) {
    const { name, help, type, values } = await metric.get();
    const lines = [`# HELP ${escapeText(name)} ${escapeText(help)}`, `# TYPE ${escapeText(name)} ${type}`];
    for (const sample of values as Array<{ value: number; labels: Record<string, string | number>; metricName?: string }>) {
      if (sample.labels[WORKSPACE_LABEL] !== workspaceId) continue;
      const labels = Object.entries(sample.labels).map(
        ([label, value]) => `${label}="${typeof value === 'string' ? escapeText(value).replace(/"/g, '\\"') : value}"`,
      );
      lines.push(`${sample.metricName ?? name}${labels.length > 0 ? `{${labels.join(',')}}` : ''} ${sampleValue(sample.value)}`);
    }
    families.push(lines.join('\n'));
  }
  return `${families.join('\n\n')}\n`;
}
