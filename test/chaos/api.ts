import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { allPages } from '../helpers/pages.js';

/** Every call is bounded: a control plane that stopped answering must not stall a scenario. */
const TIMEOUT_MS = 15_000;

export interface Workload {
  id: string;
  state: string;
  errorCode: string | null;
}

/** The management API and the inference API of one control plane (or a balancer in front of several), as admin. */
export class Api {
  constructor(
    readonly url: string,
    readonly token: string,
  ) {}

  fetch(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set('authorization', `Bearer ${this.token}`);
    if (init.body && !headers.has('content-type')) headers.set('content-type', 'application/json');
    return fetch(`${this.url}${path}`, { signal: AbortSignal.timeout(TIMEOUT_MS), ...init, headers });
  }

  private async json<T>(path: string, init?: RequestInit): Promise<T> {
    const response = await this.fetch(path, init);
    if (!response.ok) throw new Error(`${init?.method ?? 'GET'} ${path}: ${response.status} ${(await response.text()).slice(0, 300)}`);
    return (await response.json()) as T;
  }

  machines(): Promise<MachineView[]> {
    return allPages<MachineView>((path) => this.fetch(path), '/api/v1/machines');
  }

  deployment(name: string): Promise<DeploymentDetail> {
    return this.json<DeploymentDetail>(`/api/v1/deployments/${name}`);
  }

  putDeployment(name: string, spec: Record<string, unknown>): Promise<DeploymentDetail> {
    return this.json<DeploymentDetail>(`/api/v1/deployments/${name}`, { method: 'PUT', body: JSON.stringify(spec) });
  }

  workload(id: string): Promise<Workload> {
    return this.json<Workload>(`/api/v1/workloads/${id}`);
  }

  /** A counter or gauge of `/metrics`, summed over its label sets. */
  async metric(name: string): Promise<number> {
    const text = await (await this.fetch('/metrics')).text();
    let sum = 0;
    for (const match of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) sum += Number(match[1]);
    return sum;
  }

  /** One chat completion of `model`; the caller reads (or cancels) the body. */
  chat(model: string, body: Record<string, unknown> = {}, headers: Record<string, string> = {}, timeoutMs = 60_000): Promise<Response> {
    return this.fetch('/v1/chat/completions', {
      method: 'POST',
      headers,
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...body }),
      signal: AbortSignal.timeout(timeoutMs),
    });
  }
}

/** A deployment of the built-in simulator on the simulated nodes (label `sim=true`, as `startSimNode` enrolls them). */
export function simulatedDeployment(
  model: string,
  replicas: number,
  runtime: { ttftMs?: number; tokensPerSecond?: number; loadMs?: number } = {},
  extra: Record<string, unknown> = {},
) {
  return {
    model,
    runtime: {
      kind: 'simulated',
      model,
      ttftMs: runtime.ttftMs ?? 20,
      tokensPerSecond: runtime.tokensPerSecond ?? 200,
      loadMs: runtime.loadMs ?? 1_000,
      memoryMiB: 128,
      failureRate: 0,
    },
    replicas,
    selector: { sim: 'true' },
    memoryMiB: 128,
    ...extra,
  };
}

/** Replicas of `detail` that are desired and routable, by machine name. */
export const servingOn = (detail: DeploymentDetail) => detail.status.replicas.filter((r) => r.desired && r.routable).map((r) => r.machineName);
