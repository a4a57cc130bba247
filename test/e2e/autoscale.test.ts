import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { waitFor } from '../helpers/plane.js';
import { startNpmStart, type NpmStart } from '../helpers/npm-start.js';

/**
 * Autoscaling on `npm start`'s fleet (docs/autoscaling.md): a deployment held to 2 requests in flight per replica,
 * between 0 and 4 replicas, under a load that steps from 2 clients to 8 and back, then stops. Each client sends
 * one request after another; a request takes about a second on the simulated runtime.
 */
describe('autoscaling on the npm start fleet', () => {
  let fleet: NpmStart;
  beforeAll(async () => {
    // The controller passes every second: the autoscaler samples once a pass.
    fleet = await startNpmStart({ LUNANEXA_RECONCILE_INTERVAL_MS: '1000' });
  }, 120_000);
  afterAll(async () => await fleet?.stop(), 60_000);

  const status = async () => DeploymentDetail.parse(await (await fleet.admin('/api/v1/deployments/sim-auto')).json());

  /** `clients` loops of requests until `stop()`; every answer's status is kept. */
  function load(clients: number) {
    let running = true;
    const statuses: number[] = [];
    const loops = Array.from({ length: clients }, async () => {
      while (running) {
        try {
          const answer = await fetch(`${fleet.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${fleet.token}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'sim-auto', messages: [{ role: 'user', content: 'hi' }], max_tokens: 20 }),
          });
          await answer.arrayBuffer();
          statuses.push(answer.status);
        } catch {
          // No answer at all: a failed request as well.
          statuses.push(0);
        }
      }
    });
    return {
      statuses,
      stop: async () => {
        running = false;
        await Promise.all(loops);
      },
    };
  }

  it('scales out under a burst, holds its target, scales in after it with no failed request, and sleeps at zero when idle', async () => {
    const put = await fleet.admin('/api/v1/deployments/sim-auto', {
      method: 'PUT',
      body: JSON.stringify({
        model: 'sim-auto',
        runtime: { kind: 'simulated', model: 'sim-auto', ttftMs: 100, tokensPerSecond: 20, loadMs: 500, memoryMiB: 1024, failureRate: 0 },
        replicas: 1,
        selector: { sim: 'true' },
        memoryMiB: 1024,
        maxConcurrency: 8,
        autoscale: { minReplicas: 0, maxReplicas: 4, target: { metric: 'inFlightPerReplica', value: 2 }, scaleUpAfterMs: 2_000, scaleDownAfterMs: 4_000 },
      }),
    });
    expect(put.status, await put.clone().text()).toBe(200);
    await waitFor(async () => ((await status()).status.ready === 1 ? true : null), { timeoutMs: 30_000, what: 'one replica serving' });

    // The replica counts over the whole run, every quarter second.
    const seen: Array<{ t: number; desired: number; ready: number }> = [];
    const started = Date.now();
    let watching = true;
    let lastReason = '';
    const watch = (async () => {
      while (watching) {
        const { status: s } = await status();
        seen.push({ t: Date.now() - started, desired: s.desired, ready: s.ready });
        if (s.autoscaler && s.autoscaler.reason !== lastReason)
          console.log(`${Date.now() - started} ms: ${s.ready}/${s.desired} ${s.autoscaler.action}: ${(lastReason = s.autoscaler.reason)}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    })();
    const phase = (from: number) => seen.filter((s) => s.t >= from);

    const low = load(2);
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    // Two in flight on one replica is its target: it holds.
    expect(phase(0).every((s) => s.desired === 1)).toBe(true);

    const burst = load(6);
    // Eight in flight wants four replicas: it scales out (in one step or two, as the samples say) and they serve.
    const out = await waitFor(
      async () => {
        const { status: s } = await status();
        return s.desired >= 3 && s.ready === s.desired ? { t: Date.now() - started, desired: s.desired } : null;
      },
      { timeoutMs: 40_000, intervalMs: 250, what: 'three or four replicas serving the burst' },
    );
    // Near its target while the burst lasts, it never scales in under it.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    expect(phase(out.t).every((s) => s.desired >= out.desired)).toBe(true);
    await burst.stop();

    const after = Date.now() - started;
    await waitFor(async () => ((await status()).status.desired === 1 ? true : null), {
      timeoutMs: 60_000,
      intervalMs: 250,
      what: 'scaled back to one replica',
    });
    // Down in steps, never up again on the way.
    const down = phase(after).map((s) => s.desired);
    expect(down.every((n, i) => i === 0 || n <= down[i - 1]!)).toBe(true);
    await low.stop();
    await waitFor(async () => ((await status()).status.asleep ? true : null), { timeoutMs: 30_000, intervalMs: 250, what: 'asleep at zero' });
    watching = false;
    await watch;

    // No request failed through the scale-out, the scale-in and the drain of the retired replicas.
    const statuses = [...low.statuses, ...burst.statuses];
    expect(statuses.length).toBeGreaterThan(50);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);

    const detail = await status();
    expect(detail.status.desired).toBe(0);
    const scaled = detail.events.filter((e) => e.type === 'scaled').map((e) => e.message!);
    expect(scaled.some((m) => /^scaled from 1 to 4: in flight [\d.]+ per replica \(target 2\)/.test(m))).toBe(true);
    expect(scaled.some((m) => /^scaled from \d to [12]: in flight [\d.]+ per replica \(target 2\)/.test(m))).toBe(true);
    // Its last replica drains after it went to sleep: the sleep is the last decision, not the last event.
    expect(detail.events.filter((e) => e.type === 'asleep').at(-1)?.message).toMatch(/^scaled to zero: no request for \d+(\.\d)? s/);
    expect(detail.status.autoscaler).toMatchObject({ action: 'down', to: 0 });

    // The first request wakes it and is answered.
    const woken = await fetch(`${fleet.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${fleet.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-auto', messages: [{ role: 'user', content: 'wake' }], max_tokens: 2 }),
    });
    expect(woken.status, await woken.clone().text()).toBe(200);
    expect((await status()).status).toMatchObject({ asleep: false, desired: 1 });
  }, 240_000);
});
