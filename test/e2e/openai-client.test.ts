import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

interface SimStats {
  requests: number;
  completed: number;
  aborted: number;
  failed: number;
  active: number;
}

interface WorkloadView {
  id: string;
  state: string;
  machineId: string | null;
  errorCode: string | null;
}

/**
 * The official `openai` SDK against the `/v1` surface, end to end: a real control plane, two real agent
 * processes and their simulated runtimes. If the SDK can use it, so can every OpenAI-compatible client.
 */
describe('the official OpenAI SDK against /v1', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let client: OpenAI;

  const machines = async (): Promise<MachineView[]> => {
    const response = await plane.admin('/api/v1/machines');
    expect(response.status).toBe(200);
    return ((await response.json()) as { data: MachineView[] }).data;
  };
  const workload = async (id: string): Promise<WorkloadView> => {
    const response = await plane.admin(`/api/v1/workloads/${id}`);
    expect(response.status).toBe(200);
    return (await response.json()) as WorkloadView;
  };
  /** The base URL of the runtime that serves `assignmentId` on `node`, from the agent's own runtime record. */
  // The token each runtime answers only to (the agent's, in the same record), by base URL.
  const runtimeTokens = new Map<string, string>();
  const runtimeUrl = async (node: SimNode, assignmentId: string): Promise<string> => {
    const record = JSON.parse(await readFile(join(node.stateDir, 'runtimes', `${assignmentId}.json`), 'utf8')) as { port: number; token: string };
    const url = `http://127.0.0.1:${record.port}`;
    runtimeTokens.set(url, record.token);
    return url;
  };
  const simStats = async (url: string): Promise<SimStats> =>
    (await (await fetch(`${url}/sim/stats`, { headers: { authorization: `Bearer ${runtimeTokens.get(url)}` } })).json()) as SimStats;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    await seedDemoDeployment(plane, 2, { loadMs: 100 });
    nodes = await Promise.all(['sdk-1', 'sdk-2'].map((name) => startSimNode(plane, name, join(plane.dataDir, 'nodes'))));
    await waitFor(
      async () => {
        const list = await machines();
        return list.length === 2 && list.every((m) => m.state === 'ready' && m.runtimes.length === 1 && m.runtimes[0]!.routable);
      },
      { timeoutMs: 45_000, what: 'both sim-chat runtimes routable' },
    ).catch(async (error: unknown) => {
      const logs = await Promise.all(nodes.map(async (n) => `${n.name}: ${(await readFile(n.logFile, 'utf8').catch(() => '')).slice(-2_000)}`));
      throw new Error(`${String(error)}\nmachines: ${JSON.stringify(await machines())}\n${logs.join('\n')}`);
    });
    client = new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: plane.adminToken, maxRetries: 0 });
  }, 90_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('lists sim-chat among the models', async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model);
    expect(models.map((m) => m.id)).toContain('sim-chat');
    const simChat = models.find((m) => m.id === 'sim-chat')!;
    expect(simChat.object).toBe('model');
    expect(simChat.owned_by).toBe('lunanexa');
    expect(simChat.created).toBeGreaterThan(1_600_000_000);
  });

  it('answers a non-streaming chat completion with content, usage and finish_reason', async () => {
    const completion = await client.chat.completions.create({
      model: 'sim-chat',
      messages: [{ role: 'user', content: 'say something in five words' }],
      max_tokens: 8,
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.model).toBe('sim-chat');
    expect(completion.choices).toHaveLength(1);
    const choice = completion.choices[0]!;
    expect(choice.message.role).toBe('assistant');
    expect(typeof choice.message.content).toBe('string');
    expect(choice.message.content!.length).toBeGreaterThan(0);
    expect(choice.finish_reason).toBe('length');
    expect(choice.message.content).toBe('tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 ');
    expect(completion.usage).toEqual({ prompt_tokens: 5, completion_tokens: 8, total_tokens: 13 });
  });

  it('streams a chat completion; deltas concatenate to the text and the last chunk carries usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'sim-chat',
      messages: [{ role: 'user', content: 'count to twelve' }],
      max_tokens: 12,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let contentChunks = 0;
    const finishReasons: string[] = [];
    const usages: Array<OpenAI.CompletionUsage> = [];
    let last: OpenAI.Chat.Completions.ChatCompletionChunk | undefined;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      last = chunk;
      const choice = chunk.choices[0];
      if (choice?.delta.content) {
        text += choice.delta.content;
        contentChunks += 1;
      }
      if (choice?.finish_reason) finishReasons.push(choice.finish_reason);
      if (chunk.usage) usages.push(chunk.usage);
    }
    expect(contentChunks).toBe(12);
    expect(text.length).toBeGreaterThan(0);
    expect(finishReasons).toEqual(['length']);
    expect(usages).toEqual([{ prompt_tokens: 3, completion_tokens: 12, total_tokens: 15 }]);
    // With include_usage the usage chunk is the last one, with no choices.
    expect(last?.choices).toEqual([]);
    expect(last?.usage?.completion_tokens).toBe(12);

    // The same request without streaming generates the same text: the stream lost and duplicated nothing.
    const whole = await client.chat.completions.create({ model: 'sim-chat', messages: [{ role: 'user', content: 'count to twelve' }], max_tokens: 12 });
    expect(whole.choices[0]!.message.content).toBe(text);
  });

  it('serves legacy completions, plain and streamed', async () => {
    const plain = await client.completions.create({ model: 'sim-chat', prompt: 'once upon a time', max_tokens: 5 });
    expect(plain.object).toBe('text_completion');
    expect(plain.choices[0]!.text.length).toBeGreaterThan(0);
    expect(plain.choices[0]!.finish_reason).toBe('length');
    expect(plain.usage).toEqual({ prompt_tokens: 4, completion_tokens: 5, total_tokens: 9 });

    const stream = await client.completions.create({ model: 'sim-chat', prompt: 'once upon a time', max_tokens: 5, stream: true });
    let text = '';
    let pieces = 0;
    let finish: string | null = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice?.text) {
        text += choice.text;
        pieces += 1;
      }
      if (choice?.finish_reason) finish = choice.finish_reason;
    }
    expect(pieces).toBe(5);
    expect(text).toBe(plain.choices[0]!.text);
    expect(finish).toBe('length');
  });

  it('creates embeddings for a string and an array (the SDK asks for base64 and decodes it); vectors are deterministic', async () => {
    const single = await client.embeddings.create({ model: 'sim-chat', input: 'hello world' });
    expect(single.object).toBe('list');
    expect(single.data).toHaveLength(1);
    const vector = single.data[0]!.embedding;
    expect(Array.isArray(vector)).toBe(true);
    expect(vector.length).toBe(16);
    expect(vector.every((x) => typeof x === 'number' && Number.isFinite(x))).toBe(true);
    // The simulator's vectors have unit length, like a real embedding model's.
    expect(Math.hypot(...vector)).toBeCloseTo(1, 5);
    expect(single.usage).toEqual({ prompt_tokens: 2, total_tokens: 2 });

    const batch = await client.embeddings.create({ model: 'sim-chat', input: ['hello world', 'goodbye moon', 'hello world'] });
    expect(batch.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(batch.data[0]!.embedding).toEqual(vector);
    expect(batch.data[2]!.embedding).toEqual(vector);
    expect(batch.data[1]!.embedding).not.toEqual(vector);

    // The float encoding gives the same numbers the base64 one decodes to (float32 precision).
    const floats = await client.embeddings.create({ model: 'sim-chat', input: 'hello world', encoding_format: 'float' });
    const asFloat32 = Array.from(new Float32Array(floats.data[0]!.embedding));
    expect(asFloat32).toEqual(vector);
  });

  it('aborting a stream mid-generation reaches the runtime, and the workload ends cancelled', async () => {
    const byId = new Map((await machines()).map((m) => [m.id, m]));
    const urls = await Promise.all(
      [...byId.values()].map(async (m) => {
        const node = nodes.find((n) => n.name === m.name)!;
        return [m.id, await runtimeUrl(node, m.runtimes[0]!.assignmentId)] as const;
      }),
    );
    const urlOf = new Map(urls);
    const before = new Map(await Promise.all(urls.map(async ([id, url]) => [id, await simStats(url)] as const)));

    const controller = new AbortController();
    // 4000 tokens at 200 tokens/s: 20 s of generation, far longer than this test waits.
    const { data: stream, response } = await client.chat.completions
      .create(
        { model: 'sim-chat', messages: [{ role: 'user', content: 'write a very long story' }], max_tokens: 4000, stream: true },
        { signal: controller.signal },
      )
      .withResponse();
    const workloadId = response.headers.get('x-lunanexa-workload-id');
    expect(workloadId).toMatch(/\S/);
    let chunks = 0;
    const startedAt = Date.now();
    // The SDK ends the iteration quietly when its own signal aborts the response body.
    for await (const _chunk of stream) {
      chunks += 1;
      if (chunks === 5) controller.abort();
    }
    expect(controller.signal.aborted).toBe(true);
    expect(chunks).toBeGreaterThanOrEqual(5);
    expect(chunks).toBeLessThan(4000);
    expect(Date.now() - startedAt).toBeLessThan(10_000);

    const ended = await waitFor(
      async () => {
        const row = await workload(workloadId!);
        return row.state !== 'running' ? row : null;
      },
      { timeoutMs: 10_000, what: 'the workload to end' },
    );
    expect(ended.state).toBe('cancelled');
    expect(ended.machineId).not.toBeNull();

    // The runtime that served it saw the client go away: its generation was aborted, not completed.
    const served = urlOf.get(ended.machineId!)!;
    const observed = await waitFor(
      async () => {
        const stats = await simStats(served);
        return stats.aborted > before.get(ended.machineId!)!.aborted ? stats : null;
      },
      { timeoutMs: 10_000, what: 'the runtime to count the abort' },
    );
    expect(observed.aborted).toBe(before.get(ended.machineId!)!.aborted + 1);
    expect(observed.completed).toBe(before.get(ended.machineId!)!.completed);
    expect(observed.active).toBe(0);
    expect(plane.ports.dataPlane.live.size).toBe(0);
  });

  it('maps errors to the SDK error classes with code and param', async () => {
    const unknown = await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).status).toBe(404);
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).param).toBe('model');

    const stranger = new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: 'lnx_not-a-real-key', maxRetries: 0 });
    const badKey = await stranger.chat.completions.create({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(badKey).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((badKey as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401);
    expect((badKey as InstanceType<typeof OpenAI.AuthenticationError>).type).toBe('authentication_error');
    const badKeyModels = await stranger.models.list().catch((e: unknown) => e);
    expect(badKeyModels).toBeInstanceOf(OpenAI.AuthenticationError);

    const invalid = await client.chat.completions
      .create({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], temperature: 5 })
      .catch((e: unknown) => e);
    expect(invalid).toBeInstanceOf(OpenAI.BadRequestError);
    expect((invalid as InstanceType<typeof OpenAI.BadRequestError>).status).toBe(400);
    expect((invalid as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');
    expect((invalid as InstanceType<typeof OpenAI.BadRequestError>).type).toBe('invalid_request_error');
  });
});
