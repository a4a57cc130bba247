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
import type { Adoption, RuntimeAdapter, RuntimeHandle, RuntimeResponse } from './adapter.js';
import { LogRing } from './log-ring.js';

const RuntimeRecord = z.object({
  assignmentId: z.string(),
  pid: z.number().int().positive(),
  port: z.number().int().positive(),
  baseUrl: z.string(),
  instanceId: z.string(),
  specHash: z.string(),
  startedAt: z.string(),
  // Records written before the health path was kept name runtimes that all used the default.
  healthPath: z.string().default('/health'),
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

/** True while any process of the group that `pid` leads exists (a runtime's workers can outlive its leader). */
function groupAlive(pid: number): boolean {
  return pidAlive(-pid);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The `process` adapter: launches an OpenAI-compatible server command (vLLM's, llama.cpp's, the simulator)
 * in its own process group with its output in a file, so that it survives an agent restart and can be
 * re-adopted. State is kept in `<state dir>/runtimes/<assignment>.json`, output in `<assignment>.log` (and its
 * rotated segment `.log.1`).
 */
export class ProcessAdapter implements RuntimeAdapter {
  private readonly rings = new Map<string, LogRing>();

  /** Runtimes listen on loopback: never through the link's proxy, and with connections kept alive. */
  private readonly http = new Agent({ keepAliveTimeout: 30_000 });

  constructor(
    protected readonly stateDir: string,
    private readonly plan: (assignment: Assignment) => LaunchPlan,
    private readonly log: (event: string, fields?: Record<string, unknown>) => void,
  ) {}

  private recordPath(assignmentId: string) {
    return join(this.stateDir, 'runtimes', `${assignmentId}.json`);
  }
  private logPath(assignmentId: string) {
    return join(this.stateDir, 'runtimes', `${assignmentId}.log`);
  }
  /** What a runtime was launched from: one launched from anything else is never adopted for this assignment. */
  private async specHash(assignment: Assignment) {
    return await sha256Hex(canonicalize({ templateHash: assignment.templateHash, runtime: assignment.runtime, artifact: assignment.artifact }));
  }
  private ring(assignmentId: string) {
    let ring = this.rings.get(assignmentId);
    if (!ring) this.rings.set(assignmentId, (ring = new LogRing(this.logPath(assignmentId))));
    return ring;
  }

  private async readRecord(assignmentId: string): Promise<RuntimeHandle | null> {
    let text: string;
    try {
      text = await readFile(this.recordPath(assignmentId), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
    let json: unknown = null;
    try {
      json = JSON.parse(text);
    } catch {
      // Refused by the schema below, with the rest of what cannot be adopted from.
    }
    const parsed = RuntimeRecord.safeParse(json);
    if (parsed.success) return parsed.data;
    // Written atomically, so only another agent version could leave one like this: nothing to adopt from it.
    this.log('runtime record unreadable', { assignmentId, error: parsed.error.issues[0]?.message });
    return null;
  }

  async inspect(assignment: Assignment): Promise<Adoption | null> {
    const record = await this.readRecord(assignment.assignmentId);
    if (!record) return null;
    if (!pidAlive(record.pid)) {
      await rm(this.recordPath(record.assignmentId), { force: true });
      return null;
    }
    const health = await this.health(record);
    const refusal =
      record.specHash !== (await this.specHash(assignment))
        ? 'its spec changed'
        : health.instanceId !== undefined && health.instanceId !== record.instanceId
          ? 'another server answers on its port'
          : !(await this.owns(record, health))
            ? 'its pid belongs to another process'
            : null;
    if (refusal === null) return { handle: record, ready: health.ok };
    await this.release(record, refusal, health);
    return null;
  }

  /**
   * Whether the process a record names is the runtime this agent launched: it answers with its instance id or,
   * when it cannot answer (still loading, hung, another spec's health path), its environment carries that id.
   */
  private async owns(record: RuntimeHandle, health: { instanceId?: string }): Promise<boolean> {
    if (health.instanceId === record.instanceId) return true;
    try {
      const environ = await readFile(`/proc/${record.pid}/environ`, 'utf8');
      return environ.split('\0').includes(`LUNANEXA_RUNTIME_INSTANCE=${record.instanceId}`);
    } catch {
      // Gone meanwhile, or another user's process (EACCES): not a runtime of this agent either way.
      return false;
    }
  }

  /**
   * Clears a record that will not be adopted. Its process is stopped if it is ours, so that the runtime launched
   * next never runs beside it; a process that merely reused the pid is left alone.
   */
  private async release(record: RuntimeHandle, reason: string, health?: { instanceId?: string }): Promise<void> {
    const fields = { assignmentId: record.assignmentId, pid: record.pid, reason };
    if (pidAlive(record.pid)) {
      if (await this.owns(record, health ?? (await this.health(record)))) {
        this.log('stopping a runtime that cannot be adopted', fields);
        await this.stop(record);
        return;
      }
      this.log('runtime record names a process that is not ours: left alone', fields);
    }
    await rm(this.recordPath(record.assignmentId), { force: true });
  }

  async prepare(assignment: Assignment, signal: AbortSignal): Promise<void> {
    if (assignment.artifact && !assignment.artifact.uri.startsWith('file:')) {
      // Artifact pulls arrive with the model registry; until then only local pinned files are accepted.
      throw new Error(`artifact scheme of ${assignment.artifact.uri} is not supported by this agent yet`);
    }
    if (assignment.artifact) {
      // Streamed: model weights can be far larger than the memory the agent should hold.
      const hash = createHash('sha256');
      for await (const chunk of createReadStream(new URL(assignment.artifact.uri))) {
        signal.throwIfAborted();
        hash.update(chunk as Buffer);
      }
      if (hash.digest('hex') !== assignment.artifact.sha256) throw new Error('artifact digest does not match its pin');
    }
  }

  async start(assignment: Assignment): Promise<RuntimeHandle> {
    const previous = await this.readRecord(assignment.assignmentId);
    if (previous) await this.release(previous, 'a new runtime is launched in its place');
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
        healthPath: plan.healthPath,
      };
      await writeFileAtomic(this.recordPath(assignment.assignmentId), JSON.stringify(handle));
      return handle;
    } finally {
      closeSync(log);
    }
  }

  private async health(handle: RuntimeHandle): Promise<{ ok: boolean; instanceId?: string }> {
    try {
      const response = await request(`${handle.baseUrl}${handle.healthPath}`, { dispatcher: this.http, signal: AbortSignal.timeout(2_000) });
      // Reading the body to its end (even when it is not JSON) hands the connection back to the keep-alive pool.
      const body = (await response.body.json().catch(() => ({}))) as { instanceId?: string };
      return { ok: response.statusCode >= 200 && response.statusCode < 300, instanceId: body.instanceId };
    } catch {
      // Not listening yet, or hung: the callers count failed probes.
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

  /** SIGTERM to the runtime's process group, SIGKILL after 5 s; the record goes with it. */
  async stop(handle: RuntimeHandle): Promise<void> {
    const signal = (sig: NodeJS.Signals) => {
      try {
        process.kill(-handle.pid, sig);
      } catch {
        // Already gone.
      }
    };
    signal('SIGTERM');
    for (let waited = 0; waited < 5_000 && groupAlive(handle.pid); waited += 50) await sleep(50);
    if (groupAlive(handle.pid)) signal('SIGKILL');
    await rm(this.recordPath(handle.assignmentId), { force: true });
  }

  async logs(assignmentId: string, lines: number): Promise<string[]> {
    return await this.ring(assignmentId).tail(lines);
  }

  async rotateLogs(assignmentId: string): Promise<void> {
    await this.ring(assignmentId).rotate();
  }

  async forget(assignmentId: string): Promise<void> {
    await this.ring(assignmentId).remove();
    this.rings.delete(assignmentId);
    // A runtime that died by itself leaves its record behind.
    await rm(this.recordPath(assignmentId), { force: true });
  }
}
