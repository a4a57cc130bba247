import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { openSync, closeSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { z } from 'zod';
import type { Assignment } from '../../shared/contracts/desired.js';
import { canonicalize, sha256Hex } from '../../shared/canonical.js';
import { cacheSettings, insideRoots, policyRefusal, type AgentPolicy } from '../policy.js';
import { inUidRange, type RuntimeIds, type RuntimeUser, type RuntimeUsers } from '../runtime-user.js';
import { writeFileAtomic } from '../state.js';
import type { Dispatcher } from 'undici';
import { ArtifactCache, type PullProgress } from '../artifacts/cache.js';
import { proxyDispatcher } from '../proxy.js';
import { refusedByPolicy, type Adoption, type RuntimeAdapter, type RuntimeHandle, type RuntimeResponse } from './adapter.js';
import { artifactPath, executableDigest, hashArtifact, resolveRoots } from './files.js';
import { MachineHolds } from './holds.js';
import { pidAlive, stopGroup } from './process-group.js';
import { fillPlaceholders, runtimeEnv, type LaunchSpec } from './launch.js';
import { LogRing } from './log-ring.js';
import { RuntimeHttp } from './runtime-http.js';

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
  // Records written before engine metrics were read name runtimes whose metrics nobody read.
  metricsPath: z.string().nullable().default(null),
  // Records written before GPUs were reserved name runtimes that held none.
  gpuIndices: z.array(z.number().int().nonnegative()).default([]),
  // Records written before runtime calls were authenticated name runtimes launched without a token.
  token: z.string().min(1).nullable().default(null),
  // Records written before the uid was kept name runtimes of the agent's own user or of the policy's one user.
  uid: z.number().int().nonnegative().nullable().default(null),
});

export interface ProcessAdapterOptions {
  stateDir: string;
  policy: AgentPolicy;
  /**
   * Whom runtimes run as; null when the agent runs as root and its policy names no one: every launch is refused. A
   * range's runtimes get their homes in the state dir's homes dir, which `secureStateDir` made theirs to pass.
   */
  users: RuntimeUsers | null;
  /** How the assignment's runtime is launched, as the ids it runs as (null: as the agent). */
  launchSpec: (assignment: Assignment, ids: RuntimeIds | null) => LaunchSpec;
  /** The machine's GPU indices; none by default. */
  gpus?: () => Promise<number[]>;
  /** What the machine's runtimes and workers hold, shared with the worker supervisor; its own (from `gpus`) by default. */
  holds?: MachineHolds;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/** A metrics read must not hold the sampler when the runtime is busy; the next sample tries again. */
const METRICS_TIMEOUT_MS = 2_000;
/** An engine's metrics are a few hundred lines; a runtime answering more is cut off (its sample is then null). */
const METRICS_MAX_BYTES = 1024 * 1024;

/** The body as text, or null once it passes `maxBytes` (the rest is not read). */
async function boundedText(body: AsyncIterable<Uint8Array> & { destroy(): void }, maxBytes: number): Promise<string | null> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > maxBytes) {
      body.destroy();
      return null;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The header that proves a call comes from the agent; none for a runtime launched without a token. */
function authorization(handle: RuntimeHandle): Record<string, string> {
  return handle.token === null ? {} : { authorization: `Bearer ${handle.token}` };
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

/**
 * The process adapter: launches a runtime (a template's executable, the simulator) in its own process group with
 * its output in a file, so that it survives an agent restart and can be re-adopted. Nothing runs unless the local
 * policy accepts it: the control plane's signature is necessary, never sufficient. A runtime gets only its
 * assignment's variables and the agent's own few, runs unprivileged when the agent is root (a uid of the policy's
 * range of its own, or the policy's one user), and writes its output through a descriptor the agent opened, so it
 * needs no access to `runtimes/`. State is kept in `<state dir>/runtimes/<assignment>.json`, output in
 * `<assignment>.log` (and its rotated segment `.log.1`).
 */
export class ProcessAdapter implements RuntimeAdapter {
  private readonly rings = new Map<string, LogRing>();
  /** The GPUs and uids of the runtimes this adapter launched or adopted, by assignment. */
  private readonly holds: MachineHolds;

  private readonly http = new RuntimeHttp();

  private readonly stateDir: string;
  private readonly log: ProcessAdapterOptions['log'];
  private readonly cache: ArtifactCache;
  /** The registry version of each assignment this adapter prepares or runs, until it is forgotten: never evicted. */
  private readonly versionsInUse = new Map<string, string>();

  constructor(private readonly opts: ProcessAdapterOptions) {
    this.stateDir = opts.stateDir;
    this.log = opts.log;
    this.holds = opts.holds ?? new MachineHolds(opts.stateDir, opts.gpus);
    const cache = cacheSettings(opts.policy);
    this.cache = new ArtifactCache({
      dir: cache.dir ?? join(opts.stateDir, 'cache'),
      maxBytes: cache.maxBytes,
      stallMs: cache.stallSeconds * 1000,
      inUse: () => this.versionsInUse.values(),
      dispatcher: proxyDispatcher(),
      log: opts.log,
    });
  }

  /** Keeps the assignment's version (if any) out of eviction until the assignment is forgotten. */
  private holdVersion(assignment: Assignment): void {
    if (assignment.version) this.versionsInUse.set(assignment.assignmentId, assignment.version.versionId);
    else this.versionsInUse.delete(assignment.assignmentId);
  }

  cachedVersions(): string[] {
    return this.cache.cachedVersions();
  }

  /** Whom the assignment's runtime may run as, once the local policy accepts it; throws the refusal otherwise. */
  private admit(assignment: Assignment): RuntimeUsers {
    const reason = policyRefusal(this.opts.policy, assignment);
    if (reason !== null) throw refusedByPolicy(reason);
    const users = this.opts.users;
    if (!users) throw refusedByPolicy('the agent runs as root and the policy names no runAs user to run runtimes as');
    return users;
  }

  /** Whether a runtime found running runs as the policy lets runtimes run now: one switched to another user is not adopted. */
  private runsAsAllowed(record: RuntimeHandle, users: RuntimeUsers): boolean {
    if (users.kind === 'range') return record.uid !== null && inUidRange(users.uids, record.uid);
    // A record without a uid is an older agent's, which ran every runtime as the policy's one user.
    return record.uid === null || record.uid === users.user.ids?.uid;
  }

  // Encoded, so that no assignment id ('../../etc/x') names a file outside the runtimes dir; the control plane's
  // ids (letters, digits, '_', '-') are left as they are.
  private recordPath(assignmentId: string) {
    return join(this.stateDir, 'runtimes', `${encodeURIComponent(assignmentId)}.json`);
  }
  private logPath(assignmentId: string) {
    return join(this.stateDir, 'runtimes', `${encodeURIComponent(assignmentId)}.log`);
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
    this.holdVersion(assignment);
    const record = await this.readRecord(assignment.assignmentId);
    let users: RuntimeUsers;
    try {
      users = this.admit(assignment);
    } catch (refusal) {
      // A runtime the policy refuses now (it changed since the launch) stops, rather than go on as adopted.
      if (record) await this.release(record, 'the local policy refuses it');
      throw refusal;
    }
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
            : !this.runsAsAllowed(record, users)
              ? 'it runs as another user than the local policy gives'
              : null;
    if (refusal === null) {
      this.holds.adopt(record.assignmentId, { gpuIndices: record.gpuIndices, uid: users.kind === 'range' ? record.uid : null, pid: record.pid });
      return { handle: record, ready: health.ok };
    }
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

  /**
   * Stops the runtimes an earlier agent left whose assignment is not in `keep` (it left the desired state while the
   * agent was down): nothing else would ever look at their records.
   */
  async releaseOrphans(keep: ReadonlySet<string>): Promise<void> {
    const names = await readdir(join(this.stateDir, 'runtimes')).catch(() => [] as string[]);
    for (const name of names.filter((n) => n.endsWith('.json'))) {
      const assignmentId = decodeURIComponent(name.slice(0, -'.json'.length));
      if (keep.has(assignmentId)) continue;
      const record = await this.readRecord(assignmentId);
      if (record) await this.release(record, 'its assignment is no longer desired');
      await this.forget(assignmentId);
    }
  }

  async prepare(assignment: Assignment, signal: AbortSignal, onPull?: (progress: PullProgress) => void): Promise<void> {
    const users = this.admit(assignment);
    this.holdVersion(assignment);
    if (assignment.version) {
      // The state dir is private (0700) unless runtimes have uids of a range (0710, their group): a runtime running as
      // the one other user could not open a folder inside it.
      if (users.kind === 'one' && users.user.ids && insideRoots([this.stateDir], this.cache.layout.dir)) {
        throw refusedByPolicy(
          `the model cache ${this.cache.layout.dir} lies in the agent's private state dir, which runtimes running as ${users.user.name} cannot read: set cache.dir in the local policy`,
        );
      }
      await this.cache.ensure(assignment.version, signal, onPull);
    }
    if (!assignment.artifact) return;
    const limits = { maxBytes: this.opts.policy.artifactLimits.maxBytes, maxMs: this.opts.policy.artifactLimits.maxSeconds * 1000 };
    const { sha256 } = await hashArtifact(assignment.artifact.uri, await resolveRoots(this.opts.policy.artifactRoots), limits, signal);
    if (sha256 !== assignment.artifact.sha256) throw new Error('artifact digest does not match its pin');
  }

  async start(assignment: Assignment): Promise<RuntimeHandle> {
    const users = this.admit(assignment);
    const previous = await this.readRecord(assignment.assignmentId);
    if (previous) await this.release(previous, 'a new runtime is launched in its place');
    const user = await this.holds.runAs(assignment.assignmentId, users);
    try {
      return await this.launch(assignment, user);
    } catch (error) {
      this.holds.releaseUid(assignment.assignmentId);
      throw error;
    }
  }

  private async launch(assignment: Assignment, user: RuntimeUser): Promise<RuntimeHandle> {
    const spec = this.opts.launchSpec(assignment, user.ids);
    if (spec.executableSha256 !== null) {
      // Checked at every launch: the file may have changed since the last one.
      const onDisk = await executableDigest(spec.executable);
      if (onDisk !== spec.executableSha256) throw refusedByPolicy(`${spec.executable} on disk has SHA-256 ${onDisk}, not the pinned ${spec.executableSha256}`);
    }
    // A registry version's folder in the cache, which prepare laid out, else the pinned artifact.
    const modelPath = assignment.version
      ? this.cache.folder(assignment.version.versionId)
      : assignment.artifact
        ? await artifactPath(assignment.artifact.uri, await resolveRoots(this.opts.policy.artifactRoots))
        : null;
    const gpuIndices = await this.holds.reserveGpus(assignment.assignmentId, assignment.resources.gpus);
    const port = await freePort();
    const instanceId = crypto.randomUUID();
    // Only the agent knows it (the record is in its private state dir): any other local caller gets 401.
    const token = randomBytes(32).toString('base64url');
    const log = openSync(this.logPath(assignment.assignmentId), 'a', 0o600);
    try {
      const args = fillPlaceholders(spec.args, {
        port: String(port),
        instance: instanceId,
        model_path: modelPath,
        served_name: assignment.model,
        gpu_indices: gpuIndices.join(','),
        runtime_token: token,
      });
      // The runtime inherits the log descriptor opened here: it writes its output without any access to the state dir.
      const child = spawn(spec.executable, args, {
        detached: true,
        stdio: ['ignore', log, log],
        cwd: spec.cwd,
        env: runtimeEnv(spec.env, { home: user.home, port, instanceId, gpuIndices, token }),
        ...(spec.spawnAs ?? {}),
      });
      await new Promise<void>((resolve, reject) => {
        child.once('spawn', resolve);
        child.once('error', reject);
      });
      child.unref();
      this.holds.started(assignment.assignmentId, child.pid!);
      const handle: RuntimeHandle = {
        assignmentId: assignment.assignmentId,
        pid: child.pid!,
        port,
        baseUrl: `http://127.0.0.1:${port}`,
        instanceId,
        specHash: await this.specHash(assignment),
        startedAt: new Date().toISOString(),
        healthPath: spec.healthPath,
        metricsPath: spec.metricsPath,
        gpuIndices,
        token,
        uid: user.ids?.uid ?? null,
      };
      await writeFileAtomic(this.recordPath(assignment.assignmentId), JSON.stringify(handle));
      return handle;
    } catch (error) {
      this.holds.releaseGpus(assignment.assignmentId);
      throw error;
    } finally {
      closeSync(log);
    }
  }

  private async health(handle: RuntimeHandle): Promise<{ ok: boolean; instanceId?: string }> {
    try {
      const response = await this.http.request(`${handle.baseUrl}${handle.healthPath}`, {
        headers: authorization(handle),
        signal: AbortSignal.timeout(2_000),
      });
      // Reading the body to its end (even when it is not JSON) hands the connection back to the keep-alive pool.
      const body = (await response.body.json().catch(() => ({}))) as { instanceId?: string };
      return { ok: response.statusCode >= 200 && response.statusCode < 300, instanceId: body.instanceId };
    } catch {
      // Not listening yet, or hung: the callers count failed probes.
      return { ok: false };
    }
  }

  async metrics(handle: RuntimeHandle): Promise<string | null> {
    if (!handle.metricsPath) return null;
    try {
      const response = await this.http.request(`${handle.baseUrl}${handle.metricsPath}`, {
        headers: authorization(handle),
        signal: AbortSignal.timeout(METRICS_TIMEOUT_MS),
      });
      if (response.statusCode !== 200) {
        await response.body.dump();
        return null;
      }
      return await boundedText(response.body, METRICS_MAX_BYTES);
    } catch {
      // Busy, restarting or gone: its heartbeat carries no engine sample until a read succeeds again.
      return null;
    }
  }

  async ready(handle: RuntimeHandle): Promise<boolean> {
    return (await this.health(handle)).ok;
  }

  alive(handle: RuntimeHandle): boolean {
    return pidAlive(handle.pid);
  }

  async invoke(
    handle: RuntimeHandle,
    path: string,
    init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal },
  ): Promise<RuntimeResponse> {
    const response = await this.http.request(`${handle.baseUrl}${path}`, {
      method: init.method as Dispatcher.HttpMethod,
      // The agent's own credential, never one a caller passed along.
      headers: { ...Object.fromEntries(Object.entries(init.headers).filter(([name]) => name.toLowerCase() !== 'authorization')), ...authorization(handle) },
      body: init.body,
      signal: init.signal,
    });
    const contentType = response.headers['content-type'];
    return { status: response.statusCode, contentType: Array.isArray(contentType) ? contentType[0]! : (contentType ?? null), body: response.body };
  }

  /** SIGTERM to the runtime's process group, SIGKILL after 5 s; the record goes with it. */
  async stop(handle: RuntimeHandle): Promise<void> {
    await stopGroup(handle.pid, 5_000);
    this.holds.release(handle.assignmentId);
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
    this.holds.release(assignmentId);
    this.versionsInUse.delete(assignmentId);
    // A runtime that died by itself leaves its record behind.
    await rm(this.recordPath(assignmentId), { force: true });
  }
}
