import { describe, expect, it } from 'vitest';
import { type AutoscaleDecision, type AutoscaleInput, decide, MAX_SAMPLE_GAP_MS } from '../../functions/core/autoscale/decide.js';
import { type LoadSample, type ReplicaSample, readSample } from '../../functions/core/autoscale/reading.js';
import { recommend } from '../../functions/core/autoscale/recommend.js';
import { AutoscaleSpec, type AutoscaleState } from '../../shared/contracts/autoscale.js';

const T0 = Date.UTC(2026, 11, 2, 12);
/** One sample a reconcile pass. */
const STEP = 5_000;

/** Queue depth 4 per replica, 1 to 10 replicas, 30 s up, 5 min down, unless `over` says otherwise. */
const policy = (over: Record<string, unknown> = {}) =>
  AutoscaleSpec.parse({ minReplicas: 1, maxReplicas: 10, target: { metric: 'queueDepthPerReplica', value: 4 }, ...over });
const ttftPolicy = (over: Record<string, unknown> = {}) => policy({ target: { metric: 'ttftP95Ms', value: 1000 }, ...over });

const replica = (queueDepth = 0, inFlight = 0, over: Partial<ReplicaSample> = {}): ReplicaSample => ({
  machineStale: false,
  ready: true,
  queueDepth,
  inFlight,
  ...over,
});
/** `count` ready replicas sharing `queue` queued invocations evenly. */
const even = (count: number, queue: number) => Array.from({ length: count }, () => replica(queue / count));
const notReady = (count: number) => Array.from({ length: count }, () => replica(0, 0, { ready: false }));
const stale = (count: number, queue = 0) => Array.from({ length: count }, () => replica(queue, 0, { machineStale: true }));

type Load = Omit<LoadSample, 'at'>;
/** The deployment's replicas sharing `total` queued invocations, busy with requests. */
const queued =
  (total: number) =>
  (_t: number, current: number): Load => ({ replicas: even(current, total), ttftP95Ms: null, requests: 10 });
/** Every replica serving at `ttftP95Ms`. */
const ttft =
  (ttftP95Ms: number | null) =>
  (_t: number, current: number): Load => ({ replicas: even(current, 0), ttftP95Ms, requests: 10 });
/** Nothing: no request, nothing queued or running. */
const idle = (_t: number, current: number): Load => ({ replicas: even(current, 0), ttftP95Ms: null, requests: 0 });

/**
 * The autoscaler as the controller runs it: a pass every STEP ms from T0, each taking a sample (`load`, given the
 * time since T0 and the count then) and deciding over the last minute's samples; its count is applied at once.
 * `set` changes the count from outside before the pass at that time (an operator, the wake path).
 */
function drive(opts: {
  policy: AutoscaleSpec;
  current: number;
  passes: number;
  load: (t: number, current: number) => Load;
  room?: number | ((t: number) => number);
  set?: { t: number; current: number };
}) {
  let current = opts.current;
  let state: AutoscaleState | null = null;
  const samples: LoadSample[] = [];
  const decisions: (AutoscaleDecision & { t: number })[] = [];
  for (let i = 0; i < opts.passes; i++) {
    const t = i * STEP;
    if (opts.set?.t === t) current = opts.set.current;
    samples.push({ at: T0 + t, ...opts.load(t, current) });
    const room = typeof opts.room === 'function' ? opts.room(t) : (opts.room ?? 64);
    const out = decide({ policy: opts.policy, current, samples: samples.slice(-12), state, now: T0 + t, room });
    decisions.push({ t, ...out.decision });
    expect(out.desired).toBe(out.decision.to);
    current = out.desired;
    state = out.state;
  }
  const steps = decisions.filter((d) => d.action !== 'hold').map(({ t, from, to }) => ({ t, from, to }));
  return { current, decisions, steps, last: decisions.at(-1)!, at: (t: number) => decisions.find((d) => d.t === t)! };
}

/** One call over `samples` (times relative to T0), deciding at the newest one unless `now` says otherwise. */
const once = (input: Partial<AutoscaleInput> & { samples: LoadSample[] }) =>
  decide({
    policy: policy(),
    current: 2,
    state: null,
    room: 64,
    now: input.samples.reduce((m, s) => Math.max(m, s.at), T0),
    ...input,
  });
/** Samples every STEP from `from` to `to` (ms after T0, both included), each of `load` over `current` replicas. */
const series = (from: number, to: number, load: (t: number, current: number) => Load, current = 2): LoadSample[] => {
  const out: LoadSample[] = [];
  for (let t = from; t <= to; t += STEP) out.push({ at: T0 + t, ...load(t, current) });
  return out;
};

describe('readSample', () => {
  const mixed: LoadSample = {
    at: T0,
    replicas: [replica(4, 1), replica(100, 50, { machineStale: true }), replica(30, 9, { ready: false }), replica(2, 3)],
    ttftP95Ms: 800,
    requests: 0,
  };

  it('counts the ready replicas of machines that are not stale, and sums their load', () => {
    expect(readSample(mixed, 'queueDepthPerReplica')).toMatchObject({ serving: 2, value: 3, load: 6, missing: null, busy: true, requested: false });
    expect(readSample(mixed, 'inFlightPerReplica')).toMatchObject({ serving: 2, value: 2, load: 4 });
    // TTFT's load is the serving replicas at that TTFT: load / target is then the replicas it wants.
    expect(readSample(mixed, 'ttftP95Ms')).toMatchObject({ serving: 2, value: 800, load: 1600 });
  });

  it('does not count a replica whose numbers are no counts', () => {
    const junk = { ...mixed, replicas: [replica(Number.NaN), replica(-1), replica(0, Number.POSITIVE_INFINITY), replica(8)] };
    expect(readSample(junk, 'queueDepthPerReplica')).toMatchObject({ serving: 1, value: 8 });
  });

  it.each([
    ['every machine stale', { replicas: stale(3, 50) }, 'every machine of it is stale'],
    ['no replica ready', { replicas: [...notReady(2), ...stale(1)] }, 'no ready replica reports'],
    ['no replica at all', { replicas: [] }, 'no ready replica reports'],
  ])('says why a sample has no measure: %s', (_what, over, why) => {
    for (const metric of ['queueDepthPerReplica', 'inFlightPerReplica', 'ttftP95Ms'] as const) {
      expect(readSample({ ...mixed, ...over }, metric)).toMatchObject({ serving: 0, value: null, load: null, missing: why, busy: false });
    }
  });

  it('has no TTFT measure while no request finished, and still knows whether replicas are busy', () => {
    expect(readSample({ ...mixed, ttftP95Ms: null }, 'ttftP95Ms')).toMatchObject({
      serving: 2,
      value: null,
      missing: 'no TTFT measured (no request finished)',
      busy: true,
    });
    expect(readSample({ ...mixed, ttftP95Ms: Number.NaN }, 'ttftP95Ms')).toMatchObject({ value: null });
  });

  it('counts requests the plane holds for the deployment as its queue depth, as in flight in it, and as work', () => {
    const held = { ...mixed, waiting: 10 };
    expect(readSample(held, 'queueDepthPerReplica')).toMatchObject({ serving: 2, value: 8, load: 16 });
    expect(readSample(held, 'inFlightPerReplica')).toMatchObject({ serving: 2, value: 7, load: 14 });
    // TTFT is measured on the requests that finished: held ones are in it once they do.
    expect(readSample(held, 'ttftP95Ms')).toMatchObject({ value: 800, load: 1600 });
    const idle = { ...mixed, replicas: [replica(0, 0), replica(0, 0)] };
    expect(readSample(idle, 'queueDepthPerReplica').busy).toBe(false);
    expect(readSample({ ...idle, waiting: 1 }, 'queueDepthPerReplica')).toMatchObject({ busy: true, value: 0.5 });
    // A count that is no count is none.
    for (const waiting of [Number.NaN, -3]) expect(readSample({ ...idle, waiting }, 'queueDepthPerReplica')).toMatchObject({ busy: false, value: 0 });
  });

  it('takes any request count but a plain 0 as a request', () => {
    for (const requests of [1, 250, -1, Number.NaN]) expect(readSample({ ...mixed, requests }, 'ttftP95Ms').requested).toBe(true);
  });
});

describe('recommend: the count one reading wants', () => {
  it.each([
    // value per replica, serving replicas, current -> wanted, direction
    ['on target', 4, 4, 4, 4, 'hold', 'within 10 % of target'],
    ['10 % above: the band', 4.4, 4, 4, 4, 'hold', 'within 10 % of target'],
    ['10 % below: the band', 3.6, 4, 4, 4, 'hold', 'within 10 % of target'],
    ['past the band, up', 4.5, 4, 4, 5, 'up', null],
    ['sum over target', 10, 4, 4, 10, 'up', null],
    ['clamped to maxReplicas', 20, 4, 4, 10, 'up', null],
    ['at maxReplicas', 20, 10, 10, 10, 'hold', 'at maxReplicas (10)'],
    ['below, down', 2, 4, 4, 2, 'down', null],
    ['nothing: down to 1, never 0', 0, 4, 4, 1, 'down', null],
    ['below, but the load still wants the count', 3.5, 4, 4, 4, 'hold', '4 still wanted'],
    ['at minReplicas', 0, 1, 1, 1, 'hold', 'at minReplicas (1)'],
    // Two of four serve (two start): the direction is the measure's, the size the load's; they disagree, it holds.
    ['overloaded while replicas start', 6, 2, 4, 3, 'hold', '4 desired cover it'],
    ['loaded on the serving ones, more than coming', 12, 2, 4, 6, 'up', null],
  ] as const)('%s', (_what, value, serving, current, wanted, direction, hold) => {
    expect(recommend({ value, load: value * serving }, policy(), current)).toEqual({ wanted, direction, hold });
  });

  it('says why the last replica stays when only idling takes it to zero', () => {
    expect(recommend({ value: 0, load: 0 }, policy({ minReplicas: 0 }), 1)).toEqual({
      wanted: 1,
      direction: 'hold',
      hold: 'at 1 replica: only idling takes it to zero',
    });
  });

  it('does not add a replica for float noise', () => {
    // 0.1 * 3 / 0.1 is 3.0000000000000004.
    expect(recommend({ value: 0.1 * 3, load: 0.1 * 3 }, policy({ target: { metric: 'inFlightPerReplica', value: 0.1 } }), 1).wanted).toBe(3);
  });

  it('scales TTFT by the serving replicas', () => {
    const p = ttftPolicy();
    expect(recommend({ value: 2000, load: 4 * 2000 }, p, 4)).toEqual({ wanted: 8, direction: 'up', hold: null });
    expect(recommend({ value: 500, load: 4 * 500 }, p, 4)).toEqual({ wanted: 2, direction: 'down', hold: null });
  });
});

describe('decide', () => {
  describe('holding', () => {
    it.each([
      ['on target', 4],
      ['10 % above', 4.4],
      ['10 % below', 3.6],
    ])('holds a steady load %s for an hour', (_what, perReplica) => {
      const run = drive({ policy: policy(), current: 4, passes: 720, load: queued(4 * perReplica) });
      expect(run.steps).toEqual([]);
      expect(run.last).toMatchObject({ action: 'hold', from: 4, to: 4, reason: `queue depth ${perReplica} per replica (target 4): within 10 % of target` });
    });
  });

  describe('scaling up', () => {
    it('waits until a burst has wanted more replicas for scaleUpAfterMs, then records the numbers behind the step', () => {
      const run = drive({ policy: policy(), current: 2, passes: 60, load: (t, current) => queued(t < 10_000 ? 8 : 20)(t, current) });
      // The burst's first sample is at 10 s: 30 s of it end at 40 s, not a pass before.
      expect(run.steps).toEqual([{ t: 40_000, from: 2, to: 5 }]);
      expect(run.at(35_000)).toMatchObject({ action: 'hold', to: 2, reason: 'queue depth 10 per replica (target 4): 5 replicas wanted for 25 s of 30 s' });
      expect(run.at(40_000)).toEqual({
        t: 40_000,
        action: 'up',
        from: 2,
        to: 5,
        reason: 'queue depth 10 per replica (target 4): 5 replicas wanted for 30 s',
        observed: { metric: 'queueDepthPerReplica', value: 10, target: 4, replicas: 2 },
      });
      expect(run.last.reason).toBe('queue depth 4 per replica (target 4): within 10 % of target');
    });

    it('steps to the lowest count the period wanted, and again a period later while the load still wants more', () => {
      const totals = [20, 28, 24, 40, 36, 32, 30];
      const run = drive({ policy: policy(), current: 2, passes: 30, load: (t, current) => queued(totals[t / STEP] ?? 30)(t, current) });
      // 20 queued wanted 5, the least of the period; 30 then want 8, from a period starting after the step.
      expect(run.steps).toEqual([
        { t: 30_000, from: 2, to: 5 },
        { t: 65_000, from: 5, to: 8 },
      ]);
    });

    it('steps at once with scaleUpAfterMs 0', () => {
      const run = drive({ policy: policy({ scaleUpAfterMs: 0 }), current: 2, passes: 3, load: queued(20) });
      expect(run.steps).toEqual([{ t: 0, from: 2, to: 5 }]);
    });

    it('goes no higher than maxReplicas, then holds there', () => {
      const run = drive({ policy: policy({ maxReplicas: 6 }), current: 4, passes: 40, load: queued(400) });
      expect(run.steps).toEqual([{ t: 30_000, from: 4, to: 6 }]);
      expect(run.last.reason).toBe('queue depth 66.7 per replica (target 4): at maxReplicas (6)');
    });

    it('adds no more than room, and steps again once a period later', () => {
      const run = drive({ policy: policy(), current: 2, passes: 14, load: queued(40), room: 1 });
      expect(run.steps).toEqual([
        { t: 30_000, from: 2, to: 3 },
        { t: 65_000, from: 3, to: 4 },
      ]);
      expect(run.at(30_000).reason).toBe('queue depth 20 per replica (target 4): 10 replicas wanted for 30 s, room for 1');
    });

    it('holds without room, keeping its period, and steps as soon as room comes', () => {
      const run = drive({ policy: policy(), current: 6, passes: 20, load: queued(40), room: (t) => (t < 60_000 ? 0 : 64) });
      expect(run.at(55_000).reason).toBe('queue depth 6.7 per replica (target 4): 10 replicas wanted, no room');
      expect(run.steps).toEqual([{ t: 60_000, from: 6, to: 10 }]);
    });

    it('steps to twice the serving replicas (or four more) at most, and no further until the new ones serve', () => {
      // Two of four serve, the other two start for ever: queues pile up on the two.
      const load = (_t: number, current: number): Load => ({ replicas: [replica(50), replica(50), ...notReady(current - 2)], ttftP95Ms: null, requests: 10 });
      const run = drive({ policy: policy(), current: 4, passes: 120, load });
      expect(run.steps).toEqual([{ t: 30_000, from: 4, to: 6 }]);
      expect(run.at(30_000).reason).toBe('queue depth 50 per replica (target 4): 10 replicas wanted for 30 s, 6 at most while 2 serve');
      expect(run.last.reason).toBe('queue depth 50 per replica (target 4): 10 replicas wanted, 2 serving of 6');
    });

    it('does not run away on TTFT while new replicas start: it scales the serving replicas, not the count', () => {
      // Two serve at twice the target, two more start: 2 x 2 = 4 replicas are what the load wants, and 4 are coming.
      const load = (_t: number, current: number): Load => ({ replicas: [replica(), replica(), ...notReady(current - 2)], ttftP95Ms: 2000, requests: 10 });
      const run = drive({ policy: ttftPolicy(), current: 4, passes: 120, load });
      expect(run.steps).toEqual([]);
      expect(run.last.reason).toBe('TTFT p95 2000 ms (target 1000 ms): 4 desired cover it');
    });
  });

  describe('scaling down', () => {
    it('waits until the load has wanted fewer for scaleDownAfterMs, then steps to the most it wanted in that time', () => {
      // Per replica 1, 1.5, 2.5, 1.5, 1 of 4: the load wants 2, 3, 5, 3, 2 replicas of the 8.
      const totals = [8, 12, 20, 12, 8];
      const run = drive({ policy: policy(), current: 8, passes: 70, load: (t, current) => queued(totals[(t / STEP) % 5]!)(t, current) });
      expect(run.steps[0]).toEqual({ t: 300_000, from: 8, to: 5 });
      expect(run.at(295_000).reason).toBe('queue depth 1 per replica (target 4): 5 replicas enough for 295 s of 300 s');
      expect(run.at(300_000)).toMatchObject({
        action: 'down',
        reason: 'queue depth 1 per replica (target 4): 5 replicas enough for 300 s',
        observed: { metric: 'queueDepthPerReplica', value: 1, target: 4, replicas: 8 },
      });
    });

    it('removes half the replicas at most in one step, and looks again for another period before the next', () => {
      const run = drive({ policy: policy(), current: 8, passes: 200, load: queued(0) });
      expect(run.steps).toEqual([
        { t: 300_000, from: 8, to: 4 },
        { t: 605_000, from: 4, to: 2 },
        { t: 910_000, from: 2, to: 1 },
      ]);
      expect(run.at(300_000).reason).toBe('queue depth 0 per replica (target 4): 1 replica enough for 300 s, halving at most');
      expect(run.last.reason).toBe('queue depth 0 per replica (target 4): at minReplicas (1)');
    });

    it('never goes below minReplicas', () => {
      const run = drive({ policy: policy({ minReplicas: 3 }), current: 6, passes: 200, load: queued(0) });
      expect(run.steps).toEqual([{ t: 300_000, from: 6, to: 3 }]);
    });
  });

  describe('flapping', () => {
    it.each([
      ['every pass', 1],
      ['every 20 s', 4],
      ['every 25 s', 5],
    ])('does not move on a load swinging above and below the target %s', (_what, passesPerSwing) => {
      // 6 or 2 per replica of 4: the swings want 6 and 2 replicas in turn.
      const run = drive({
        policy: policy(),
        current: 4,
        passes: 720,
        load: (t, current) => queued(Math.floor(t / STEP / passesPerSwing) % 2 ? 8 : 24)(t, current),
      });
      expect(run.steps).toEqual([]);
    });

    it('steps up once on swings longer than scaleUpAfterMs, and never back down while they go on', () => {
      const run = drive({ policy: policy(), current: 4, passes: 720, load: (t, current) => queued(Math.floor(t / 60_000) % 2 ? 8 : 24)(t, current) });
      expect(run.steps).toEqual([{ t: 30_000, from: 4, to: 6 }]);
    });

    it('steps up once on its first swing without a wait, and never back down while it swings', () => {
      const run = drive({ policy: policy({ scaleUpAfterMs: 0 }), current: 4, passes: 720, load: (t, current) => queued((t / STEP) % 2 ? 8 : 24)(t, current) });
      expect(run.steps).toEqual([{ t: 0, from: 4, to: 6 }]);
    });

    it.each([
      ['the other way', queued(4)],
      ['on target', queued(16)],
    ])('starts the period afresh on a sample %s', (_what, interruption) => {
      // Above from 0 s, one sample at 30 s interrupts, above again from 35 s: 30 s of it end at 65 s.
      const run = drive({ policy: policy(), current: 4, passes: 20, load: (t, current) => (t === 30_000 ? interruption : queued(40))(t, current) });
      expect(run.steps[0]).toEqual({ t: 65_000, from: 4, to: 8 });
    });

    it('starts the period afresh when the count changes from outside', () => {
      const run = drive({ policy: policy(), current: 2, passes: 20, load: queued(40), set: { t: 20_000, current: 3 } });
      // The period starts over with the sample of 20 s, measured against 3.
      expect(run.at(20_000).reason).toBe('queue depth 13.3 per replica (target 4): 10 replicas wanted for 0 s of 30 s');
      expect(run.steps[0]).toEqual({ t: 50_000, from: 3, to: 7 });
    });
  });

  describe('missing data', () => {
    it('holds without samples, or when the newest is more than MAX_SAMPLE_GAP_MS old', () => {
      expect(once({ samples: [] })).toMatchObject({ desired: 2, decision: { action: 'hold', reason: 'no recent sample' } });
      const burst = series(0, 60_000, queued(40));
      const newest = T0 + 60_000;
      expect(once({ samples: burst, now: newest + MAX_SAMPLE_GAP_MS }).decision).toMatchObject({ action: 'up', to: 6 });
      expect(once({ samples: burst, now: newest + MAX_SAMPLE_GAP_MS + 1 }).decision).toMatchObject({ action: 'hold', reason: 'no recent sample' });
    });

    it.each([
      ['no replica ready', { replicas: notReady(2) }, 'no ready replica reports'],
      ['every machine stale', { replicas: stale(2, 40) }, 'every machine of it is stale'],
      ['no replica', { replicas: [] }, 'no ready replica reports'],
    ])('neither scales up nor down when the newest sample has %s', (_what, newest, reason) => {
      const at = T0 + 400_000;
      const up = [...series(0, 395_000, queued(40)), { at, ttftP95Ms: null, requests: 10, ...newest }];
      expect(once({ samples: up }).decision).toMatchObject({ action: 'hold', to: 2, reason });
      const down = [...series(0, 395_000, queued(0)), { at, ttftP95Ms: null, requests: 10, ...newest }];
      expect(once({ samples: down, current: 8 }).decision).toMatchObject({ action: 'hold', to: 8, reason });
    });

    it('keeps a period through a stretch without data up to MAX_SAMPLE_GAP_MS, and starts it afresh past that', () => {
      // Above from 0 s to 20 s, then no ready replica until `back`, then above again.
      const gap = (back: number) => (t: number, current: number) =>
        t > 20_000 && t < back ? { replicas: notReady(current), ttftP95Ms: null, requests: 10 } : queued(40)(t, current);
      expect(drive({ policy: policy(), current: 2, passes: 40, load: gap(20_000 + MAX_SAMPLE_GAP_MS) }).steps[0]).toEqual({ t: 80_000, from: 2, to: 6 });
      expect(drive({ policy: policy(), current: 2, passes: 40, load: gap(20_000 + MAX_SAMPLE_GAP_MS + STEP) }).steps[0]).toEqual({
        t: 115_000,
        from: 2,
        to: 6,
      });
    });

    it('holds on TTFT while none is measured, and a stretch without one neither ends nor extends the period', () => {
      const run = drive({ policy: ttftPolicy(), current: 4, passes: 120, load: (t, current) => ttft(t >= 10_000 && t < 50_000 ? null : 2000)(t, current) });
      expect(run.at(30_000).reason).toBe('no TTFT measured (no request finished)');
      // The period runs from 0 s: the first measure after the stretch, at 50 s, has it 50 s long.
      expect(run.steps[0]).toEqual({ t: 50_000, from: 4, to: 8 });
      expect(drive({ policy: ttftPolicy(), current: 4, passes: 120, load: ttft(null) }).steps).toEqual([]);
    });
  });

  describe('stale machines', () => {
    it("ignores a stale machine's replicas, however loaded or idle", () => {
      const loaded = (_t: number, current: number): Load => ({ replicas: [...even(current, current * 4), ...stale(3, 1000)], ttftP95Ms: null, requests: 10 });
      expect(drive({ policy: policy(), current: 2, passes: 120, load: loaded }).steps).toEqual([]);
      // Two fresh replicas at 10 each want 5; the stale one's 0 does not dilute them.
      const diluted = (_t: number, current: number): Load => ({ replicas: [...even(current, 20), ...stale(4, 0)], ttftP95Ms: null, requests: 10 });
      const run = drive({ policy: policy(), current: 2, passes: 9, load: diluted });
      expect(run.steps).toEqual([{ t: 30_000, from: 2, to: 5 }]);
      expect(run.at(30_000).observed).toEqual({ metric: 'queueDepthPerReplica', value: 10, target: 4, replicas: 2 });
    });

    it('holds while every machine of it is stale', () => {
      const run = drive({ policy: policy(), current: 4, passes: 120, load: (_t, current) => ({ replicas: stale(current, 40), ttftP95Ms: 5000, requests: 0 }) });
      expect(run.steps).toEqual([]);
      expect(run.last).toMatchObject({ reason: 'every machine of it is stale', observed: { value: null, replicas: 0 } });
    });
  });

  describe('TTFT p95', () => {
    it.each([
      // TTFT p95 of 4 serving replicas, target 1000 ms -> the first step
      [1000, null],
      [1100, null],
      [900, null],
      [1200, { t: 30_000, from: 4, to: 5 }],
      [2000, { t: 30_000, from: 4, to: 8 }],
      [850, null], // 4 x 0.85 still wants 4
      [500, { t: 300_000, from: 4, to: 2 }],
      [100, { t: 300_000, from: 4, to: 2 }], // wants 1: halving at most
    ])('at %i ms steps %j', (ms, step) => {
      expect(drive({ policy: ttftPolicy(), current: 4, passes: 70, load: ttft(ms) }).steps[0] ?? null).toEqual(step);
    });

    it('records the TTFT behind the step', () => {
      const run = drive({ policy: ttftPolicy(), current: 4, passes: 7, load: ttft(1200) });
      expect(run.last).toMatchObject({
        action: 'up',
        reason: 'TTFT p95 1200 ms (target 1000 ms): 5 replicas wanted for 30 s',
        observed: { metric: 'ttftP95Ms', value: 1200, target: 1000, replicas: 4 },
      });
    });
  });

  describe('zero replicas', () => {
    it.each([
      ['queue depth', policy({ minReplicas: 0 })],
      ['TTFT', ttftPolicy({ minReplicas: 0 })],
    ])('scales to zero once no request came for scaleDownAfterMs, with minReplicas 0 (%s)', (_what, p) => {
      const run = drive({ policy: p, current: 3, passes: 80, load: idle });
      expect(run.steps).toEqual([{ t: 300_000, from: 3, to: 0 }]);
      expect(run.at(300_000).reason).toBe('no request for 300 s');
      expect(run.last.reason).toBe('at zero replicas: the first request wakes it');
    });

    it('waits scaleDownAfterMs from the last request', () => {
      const run = drive({ policy: policy({ minReplicas: 0 }), current: 1, passes: 120, load: (t, current) => (t === 200_000 ? queued(0) : idle)(t, current) });
      expect(run.steps).toEqual([{ t: 505_000, from: 1, to: 0 }]);
    });

    it('does not while a replica has work running, however long no request came', () => {
      const busy = (_t: number, current: number): Load => ({ replicas: [replica(0, 1), ...even(current - 1, 0)], ttftP95Ms: null, requests: 0 });
      // In flight 1 on 2 wants 1 replica (of 4 per replica): it goes down to 1, and stays.
      const run = drive({ policy: policy({ minReplicas: 0, target: { metric: 'inFlightPerReplica', value: 4 } }), current: 2, passes: 400, load: busy });
      expect(run.steps).toEqual([{ t: 300_000, from: 2, to: 1 }]);
    });

    it('does not with minReplicas 1, which an idle deployment is brought down to', () => {
      expect(drive({ policy: policy(), current: 2, passes: 200, load: idle }).steps).toEqual([{ t: 300_000, from: 2, to: 1 }]);
    });

    it('does not while its newest sample has no replica reporting', () => {
      const samples = [...series(0, 400_000, idle), { at: T0 + 405_000, replicas: stale(2), ttftP95Ms: null, requests: 0 }];
      expect(once({ samples, policy: policy({ minReplicas: 0 }) }).decision).toMatchObject({ action: 'hold', reason: 'every machine of it is stale' });
    });

    it('never scales up from zero on its own data, whatever minReplicas says: the first request wakes it', () => {
      for (const p of [policy({ minReplicas: 0 }), policy({ minReplicas: 2 })]) {
        const run = drive({ policy: p, current: 0, passes: 60, load: (_t) => ({ replicas: [replica(50)], ttftP95Ms: 9000, requests: 10 }) });
        expect(run.steps).toEqual([]);
        expect(run.last).toMatchObject({ action: 'hold', to: 0, reason: 'at zero replicas: the first request wakes it' });
      }
    });
  });

  describe('the policy bounds', () => {
    it('brings a count above maxReplicas down to it at once, without data', () => {
      expect(once({ samples: [], current: 12 }).decision).toMatchObject({ action: 'down', from: 12, to: 10, reason: 'above maxReplicas (10)' });
    });

    it.each([
      [64, 3, 'up', 'below minReplicas (3)'],
      [1, 2, 'up', 'below minReplicas (3), room for 1'],
      [0, 1, 'hold', 'below minReplicas (3), no room'],
    ])('brings a count below minReplicas up to it at once, with room %i', (room, to, action, reason) => {
      expect(once({ samples: [], current: 1, room, policy: policy({ minReplicas: 3 }) }).decision).toMatchObject({ action, from: 1, to, reason });
    });
  });

  describe('state', () => {
    it('folds each sample once, however the windows overlap', () => {
      const samples = series(0, 20_000, queued(40));
      const first = once({ samples });
      expect(first.state).toEqual({ replicas: 2, seenUntil: T0 + 20_000, trend: { direction: 'up', since: T0, lastAt: T0 + 20_000, bound: 10 }, idle: null });
      expect(once({ samples, state: first.state }).state).toEqual(first.state);
      // Out of order and overlapping: the same state.
      const more = series(10_000, 25_000, queued(40)).reverse();
      expect(once({ samples: more, state: first.state }).state.trend).toEqual({ direction: 'up', since: T0, lastAt: T0 + 25_000, bound: 10 });
    });

    it('starts from the window after a restart: a window covering scaleUpAfterMs steps at once', () => {
      expect(once({ samples: series(0, 60_000, queued(40)) }).decision).toMatchObject({ action: 'up', to: 6 });
      expect(once({ samples: series(35_000, 60_000, queued(40)) }).decision).toMatchObject({ action: 'hold' });
    });

    it('leaves a sample stamped after now to a later call', () => {
      const samples = [...series(0, 25_000, queued(40)), { at: T0 + 30_000, ...queued(40)(0, 2) }];
      const early = once({ samples, now: T0 + 25_000 });
      expect(early.decision.action).toBe('hold');
      expect(early.state.seenUntil).toBe(T0 + 25_000);
      expect(once({ samples, state: early.state, now: T0 + 30_000 }).decision.action).toBe('up');
    });

    it('starts the period afresh after its own step: the state it returns carries the new count', () => {
      const samples = series(0, 30_000, queued(40));
      const up = once({ samples });
      expect(up.state).toMatchObject({ replicas: 6, trend: null });
      // The step is not applied yet, or it is: either way nothing moves before a new sample.
      expect(once({ samples, current: 2, state: up.state }).decision).toMatchObject({
        action: 'hold',
        reason: 'queue depth 20 per replica (target 4): 10 replicas wanted, from the next sample on',
      });
      expect(once({ samples, current: 6, state: up.state }).decision).toMatchObject({
        action: 'hold',
        reason: 'queue depth 20 per replica (target 4): 10 replicas wanted, from the next sample on',
      });
    });

    it('never throws on junk, and counts it as no room, no replica and a request', () => {
      const junk: LoadSample = { at: T0, replicas: [replica(Number.NaN, -3)], ttftP95Ms: Number.NaN, requests: Number.NaN };
      expect(once({ samples: [junk], room: Number.NaN, current: Number.NaN }).decision).toMatchObject({ action: 'hold', to: 0 });
      expect(once({ samples: [junk, { at: Number.NaN, replicas: [], ttftP95Ms: null, requests: 0 }], now: T0 }).decision.reason).toBe(
        'no ready replica reports',
      );
      const uncounted = series(0, 400_000, (t, current) => ({ ...idle(t, current), requests: Number.NaN }));
      expect(once({ samples: uncounted, policy: policy({ minReplicas: 0 }) }).decision).toMatchObject({ action: 'down', to: 1 });
      expect(once({ samples: series(0, 60_000, queued(40)), room: Number.NaN }).decision.reason).toBe(
        'queue depth 20 per replica (target 4): 10 replicas wanted, no room',
      );
    });
  });
});
