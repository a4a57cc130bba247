import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { openSync, closeSync, createReadStream } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { z } from 'zod';
import type { Assignment } from '../../shared/contracts/desired.js';
import { canonicalize, sha256Hex } from '../../shared/canonical.js';
import { writeFileAtomic } from '../state.js';
import { Agent, request, type Dispatcher } from 'undici';
import type { RuntimeAdapter, RuntimeHandle, RuntimeResponse } from './adapter.js';
import { LogRing } from './log-ring.js';

const RuntimeRecord = z.object({
  assignmentId: z.string(),
  pid: z.number().int().positive(),
  port: z.number().int().positive(),
  baseUrl: z.string(),
  instanceId: z.string(),
  specHash: z.string(),
  startedAt: z.string(),
});

/** How to launch an assignment: the argv (`{port}` and `{instance}` are filled in at launch), its environment and health path. */
export interface LaunchPlan {
  command: string[];
  env: Record<string, string>;
  healthPath: string;
}

/** A free loopback port, picked by the kernel. */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The `process` adapter: launches an OpenAI-compatible server command (vLLM's, llama.cpp's, the simulator)
 * in its own process group with its output in a file, so that it survives an agent restart and can be
 * re-adopted. State is kept in `<state dir>/runtimes/<assignment>.json`.
 */
export class ProcessAdapter implements RuntimeAdapter {
  private readonly rings = new Map<string, LogRing>();

  private readonly healthPaths = new Map<string, string>();

  /** Runtimes listen on loopback: never through the link's proxy, and with connections kept alive. */
  private readonly http = new Agent({ keepAliveTimeout: 30_000 });

  constructor(
    protected readonly stateDir: string,
    private readonly plan: (assignment: Assignment) => LaunchPlan,
  ) {}

  private recordPath(assignmentId: string) {
    return join(this.stateDir, 'runtimes', `${assignmentId}.json`);
  }
  private logPath(assignmentId: string) {
    return join(this.stateDir, 'runtimes', `${assignmentId}.log`);
  }
  private async specHash(assignment: Assignment) {
    return await sha256Hex(canonicalize({ runtime: assignment.runtime, artifact: assignment.artifact }));
  }
  private ring(assignmentId: string) {
    let ring = this.rings.get(assignmentId);
    if (!ring) this.rings.set(assignmentId, (ring = new LogRing(this.logPath(assignmentId))));
    return ring;
  }

  async inspect(assignment: Assignment): Promise<RuntimeHandle | null> {
    let record: RuntimeHandle;
    try {
      record = RuntimeRecord.parse(JSON.parse(await readFile(this.recordPath(assignment.assignmentId), 'utf8')));
    } catch {
      return null;
    }
    if (record.specHash !== (await this.specHash(assignment)) || !pidAlive(record.pid)) return null;
    this.healthPaths.set(assignment.assignmentId, this.plan(assignment).healthPath);
    // The pid alone could have been reused: only our runtime answers with its instance id.
    const identity = await this.health(record);
    if (!identity.ok || (identity.instanceId !== undefined && identity.instanceId !== record.instanceId)) return null;
    return record;
  }

  async prepare(assignment: Assignment): Promise<void> {
    if (assignment.artifact && !assignment.artifact.uri.startsWith('file:')) {
      // Artifact pulls arrive with the model registry; until then only local pinned files are accepted.
      throw new Error(`artifact scheme of ${assignment.artifact.uri} is not supported by this agent yet`);
    }
    if (assignment.artifact) {
      // Streamed: model weights can be far larger than the memory the agent should hold.
      const hash = createHash('sha256');
      for await (const chunk of createReadStream(new URL(assignment.artifact.uri))) hash.update(chunk);
      if (hash.digest('hex') !== assignment.artifact.sha256) throw new Error('artifact digest does not match its pin');
    }
  }

  async start(assignment: Assignment): Promise<RuntimeHandle> {
    const plan = this.plan(assignment);
    const port = await freePort();
    const instanceId = crypto.randomUUID();
    const argv = plan.command.map((arg) => arg.replaceAll('{port}', String(port)).replaceAll('{instance}', instanceId));
    const log = openSync(this.logPath(assignment.assignmentId), 'a', 0o600);
    try {
      const child = spawn(argv[0]!, argv.slice(1), {
        detached: true,
        stdio: ['ignore', log, log],
        env: { ...process.env, ...plan.env, PORT: String(port), LUNANEXA_RUNTIME_INSTANCE: instanceId },
      });
      await new Promise<void>((resolve, reject) => {
        child.once('spawn', resolve);
        child.once('error', reject);
      });
      child.unref();
      const handle: RuntimeHandle = {
        assignmentId: assignment.assignmentId,
        pid: child.pid!,
        port,
        baseUrl: `http://127.0.0.1:${port}`,
        instanceId,
        specHash: await this.specHash(assignment),
        startedAt: new Date().toISOString(),
      };
      await writeFileAtomic(this.recordPath(assignment.assignmentId), JSON.stringify(handle));
      this.healthPaths.set(assignment.assignmentId, plan.healthPath);
      return handle;
    } finally {
      closeSync(log);
    }
  }

  private async health(handle: RuntimeHandle): Promise<{ ok: boolean; instanceId?: string }> {
    try {
      const response = await request(`${handle.baseUrl}${this.healthPaths.get(handle.assignmentId) ?? '/health'}`, { dispatcher: this.http, signal: AbortSignal.timeout(2_000) });
      // Reading the body to its end (even when it is not JSON) hands the connection back to the keep-alive pool.
      const body = (await response.body.json().catch(() => ({}))) as { instanceId?: string };
      return { ok: response.statusCode >= 200 && response.statusCode < 300, instanceId: body.instanceId };
    } catch {
      return { ok: false };
    }
  }

  async ready(handle: RuntimeHandle): Promise<boolean> {
    return (await this.health(handle)).ok;
  }

  alive(handle: RuntimeHandle): boolean {
    return pidAlive(handle.pid);
  }

  async invoke(handle: RuntimeHandle, path: string, init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal }): Promise<RuntimeResponse> {
    const response = await request(`${handle.baseUrl}${path}`, { method: init.method as Dispatcher.HttpMethod, headers: init.headers, body: init.body, signal: init.signal, dispatcher: this.http });
    const contentType = response.headers['content-type'];
    return { status: response.statusCode, contentType: Array.isArray(contentType) ? contentType[0]! : (contentType ?? null), body: response.body };
  }

  async drain(): Promise<void> {
    // In-flight invocations are tracked by the relay, which stops routing here before drain is called.
  }

  async stop(handle: RuntimeHandle): Promise<void> {
    const signal = (sig: NodeJS.Signals) => {
      try {
        process.kill(-handle.pid, sig);
      } catch {
        // Already gone.
      }
    };
    signal('SIGTERM');
    for (let waited = 0; waited < 5_000 && pidAlive(handle.pid); waited += 50) await sleep(50);
    if (pidAlive(handle.pid)) signal('SIGKILL');
    await rm(this.recordPath(handle.assignmentId), { force: true });
  }

  async logs(handle: RuntimeHandle, lines: number): Promise<string[]> {
    const ring = this.ring(handle.assignmentId);
    await ring.poll();
    return ring.tail(lines);
  }
}
