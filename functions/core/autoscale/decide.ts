import type { AutoscaleSpec, AutoscaleState, AutoscalerDecision } from '../../../shared/contracts/autoscale.js';
import { type LoadSample, type Reading, readSample } from './reading.js';
import { describeMeasure, recommend } from './recommend.js';

/**
 * Per-deployment autoscaling, the decision (issue 24): how many replicas a deployment with an `autoscale` policy
 * should want now. Pure, and it never throws: the controller gathers, this decides, the controller applies.
 *
 * How to call it, once per autoscaled deployment per reconcile pass:
 *   decide({ policy, current, samples, state, now, room }) -> { desired, state, decision }
 * - `policy`: the deployment's parsed `AutoscaleSpec` (shared/contracts/autoscale.ts).
 * - `current`: its desired replica count now (the stable set's; 0 while asleep).
 * - `samples`: its `LoadSample`s (reading.ts) over a recent window, in any order. Windows may overlap from call to call: the state
 *   remembers the newest sample folded in, and each is folded once. One a pass is the intended pace; samples stamped
 *   after `now` wait for a later call.
 * - `state`: the previous call's `state`, or null: on the first call, after a restart (the periods then start over
 *   from the window) and after the policy changed (they were measured against the old one). Plain JSON: it may be
 *   kept in memory or in a jsonb column alike.
 * - `now`: the control plane's clock, epoch ms, the clock the samples are stamped with.
 * - `room`: how many more replicas the fleet and the workspace's quota can take now (0 if none; Infinity: unbounded).
 * It returns the count to want (`desired`, equal to `current` on a hold), the state to pass next time, and
 * `decision`: the action with the numbers behind it, whose `reason` is a deployment event's message when `action` is
 * not `hold`. Desired 0 means asleep: the caller puts the deployment to sleep as `scaleToZero` does, and its wake on
 * the first request brings it back (to `max(1, minReplicas)` is the wake path's choice, not this one's).
 *
 * The rules, in the order they apply:
 * 1. At 0 replicas it holds: waking is the first request's path, never the autoscaler's own data.
 * 2. A count outside [minReplicas, maxReplicas] moves to the bound at once (minReplicas within `room`): a policy
 *    bound, not a load measure, so it waits for no period and needs no data.
 * 3. It acts on data only: the newest sample must be at most `MAX_SAMPLE_GAP_MS` old and have a counted replica
 *    (ready, on a machine that is not stale) reporting, and the measure, else it holds. Stale machines' replicas
 *    never count; when every machine is stale it holds.
 * 4. Each sample with data gives a recommendation (recommend.ts): ceil(load / target), clamped to
 *    [max(1, minReplicas), maxReplicas], where load is the queue depth or in-flight count summed over the counted
 *    replicas, and for TTFT p95 the counted replicas times it: ceil(serving x p95 / target). Serving, not `current`:
 *    replicas still starting produced no part of that TTFT, and counting them would scale up again on every period
 *    they take to start. Within 10 % of target it holds; so does a sample whose measure is above target while its
 *    count is not above `current` (replicas coming), or below while its count is not below.
 * 5. Consecutive samples recommending more (or fewer) replicas than `current` form a period. A sample that holds or
 *    recommends the other way ends it, so flapping load never completes one; a sample without data neither extends
 *    nor ends it, but more than `MAX_SAMPLE_GAP_MS` between two samples with data ends it; a change of `current`
 *    (this step's or anyone's) ends it, so that the next step is judged on what the new count does.
 * 6. Up, once a period has lasted `scaleUpAfterMs` (its first sample to its newest): to the lowest count it
 *    recommended, the count the load needed all through it (a spike inside it does not size the step; a load that
 *    keeps growing takes another step a period later). At most max(2 x serving, serving + 4), HPA's default step:
 *    while new replicas start, queues pile up and TTFT rises on the old ones, and without that cap each period
 *    would step again on replicas that never served. And at most `room`: a step that cannot grow holds, its period
 *    kept, and goes as soon as room comes.
 * 7. Down, once a period has lasted `scaleDownAfterMs`: to the highest count it recommended (the most the load
 *    needed in it), keeping half of `current` at least (rounded up). A measure far below target, TTFT above all
 *    (flat until replicas saturate), says little about how few would do: halve, then look for another period.
 * 8. To zero, only with minReplicas 0, once for `scaleDownAfterMs` no request started and no counted replica had
 *    work queued or running. A request in any sample, with data or not, ends that idle period.
 */

/** A gap this long between samples with data is missing data: three heartbeats (20 s at most), a machine's lifetime. */
export const MAX_SAMPLE_GAP_MS = 60_000;

export interface AutoscaleInput {
  policy: AutoscaleSpec;
  current: number;
  samples: readonly LoadSample[];
  state: AutoscaleState | null;
  now: number;
  room: number;
}

/** A decision as the deployment's status shows it, less the moment: the caller stamps it. */
export type AutoscaleDecision = Omit<AutoscalerDecision, 'at'>;

export interface AutoscaleOutcome {
  desired: number;
  state: AutoscaleState;
  decision: AutoscaleDecision;
}

type Period = NonNullable<AutoscaleState['idle']>;

const extend = (period: Period | null, at: number): Period =>
  period !== null && at - period.lastAt <= MAX_SAMPLE_GAP_MS ? { since: period.since, lastAt: at } : { since: at, lastAt: at };

/** `state` with one more sample, newer than its `seenUntil`, folded in (rule 5 and rule 8's idle period). */
function fold(state: AutoscaleState, reading: Reading, policy: AutoscaleSpec): AutoscaleState {
  let idle = state.idle;
  if (reading.requested || reading.busy) idle = null;
  else if (reading.serving > 0) idle = extend(idle, reading.at);
  let trend = state.trend;
  if (reading.value !== null && reading.load !== null) {
    const { wanted, direction } = recommend({ value: reading.value, load: reading.load }, policy, state.replicas);
    if (direction === 'hold') trend = null;
    else if (trend === null || trend.direction !== direction || reading.at - trend.lastAt > MAX_SAMPLE_GAP_MS)
      trend = { direction, since: reading.at, lastAt: reading.at, bound: wanted };
    else trend = { ...trend, lastAt: reading.at, bound: direction === 'up' ? Math.min(trend.bound, wanted) : Math.max(trend.bound, wanted) };
  }
  return { ...state, seenUntil: reading.at, idle, trend };
}

const seconds = (ms: number) => `${Math.round(ms / 100) / 10} s`;
const replicas = (n: number) => `${n} ${n === 1 ? 'replica' : 'replicas'}`;

/** The replicas `policy` wants now, and why: the rules are in this file's header. Pure. */
export function decide(input: AutoscaleInput): AutoscaleOutcome {
  const { policy, now } = input;
  const current = Number.isFinite(input.current) ? Math.max(0, Math.floor(input.current)) : 0;
  const room = Number.isNaN(input.room) ? 0 : Math.max(0, Math.floor(input.room));
  const metric = policy.target.metric;
  const target = policy.target.value;

  let state: AutoscaleState = {
    replicas: current,
    seenUntil: input.state?.seenUntil ?? null,
    trend: input.state?.replicas === current ? input.state.trend : null,
    idle: input.state?.idle ?? null,
  };
  const fresh = input.samples
    .filter((s) => Number.isFinite(s.at) && s.at <= now && (state.seenUntil === null || s.at > state.seenUntil))
    .sort((a, b) => a.at - b.at);
  for (const sample of fresh) state = fold(state, readSample(sample, metric), policy);

  const newestSample = input.samples
    .filter((s) => Number.isFinite(s.at) && s.at <= now)
    .reduce<LoadSample | null>((a, s) => (a === null || s.at > a.at ? s : a), null);
  const newest = newestSample === null ? null : readSample(newestSample, metric);
  const observed = { metric, value: newest?.value ?? null, target, replicas: newest?.serving ?? 0 };
  const hold = (reason: string): AutoscaleOutcome => ({ desired: current, state, decision: { action: 'hold', from: current, to: current, reason, observed } });
  const move = (to: number, reason: string): AutoscaleOutcome => ({
    desired: to,
    state: { ...state, replicas: to, trend: null, idle: to === 0 ? null : state.idle },
    decision: { action: to > current ? 'up' : 'down', from: current, to, reason, observed },
  });

  // Rules 1 and 2: the count itself, before any data.
  if (current === 0) return hold('at zero replicas: the first request wakes it');
  if (current > policy.maxReplicas) return move(policy.maxReplicas, `above maxReplicas (${policy.maxReplicas})`);
  if (current < policy.minReplicas) {
    const to = Math.min(policy.minReplicas, current + room);
    if (to === current) return hold(`below minReplicas (${policy.minReplicas}), no room`);
    return move(to, `below minReplicas (${policy.minReplicas})${to < policy.minReplicas ? `, room for ${room}` : ''}`);
  }

  // Rule 3: act on recent data only.
  if (newest === null || now - newest.at > MAX_SAMPLE_GAP_MS) return hold('no recent sample');
  if (newest.serving === 0) return hold(newest.missing ?? 'no ready replica reports');

  // Rule 8, before the measure: an idle deployment has no TTFT to measure.
  const idle = state.idle;
  if (policy.minReplicas === 0 && idle !== null && idle.lastAt === newest.at && idle.lastAt - idle.since >= policy.scaleDownAfterMs) {
    return move(0, `no request for ${seconds(idle.lastAt - idle.since)}`);
  }

  if (newest.value === null || newest.load === null) return hold(newest.missing ?? 'no measure');
  const measure = describeMeasure(metric, newest.value, target);
  const asked = recommend({ value: newest.value, load: newest.load }, policy, current);
  if (asked.hold !== null) return hold(`${measure}: ${asked.hold}`);
  const trend = state.trend;
  // The count changed since the newest sample was folded: its period starts with the next one.
  if (trend === null || trend.lastAt !== newest.at) return hold(`${measure}: ${replicas(asked.wanted)} wanted, from the next sample on`);

  const lasted = trend.lastAt - trend.since;
  if (trend.direction === 'up') {
    if (lasted < policy.scaleUpAfterMs) return hold(`${measure}: ${replicas(trend.bound)} wanted for ${seconds(lasted)} of ${seconds(policy.scaleUpAfterMs)}`);
    const cap = Math.max(2 * newest.serving, newest.serving + 4);
    const to = Math.min(trend.bound, cap, current + room);
    if (to <= current) {
      return hold(`${measure}: ${replicas(trend.bound)} wanted, ${room === 0 ? 'no room' : `${newest.serving} serving of ${current}`}`);
    }
    const limited = to === trend.bound ? '' : to === current + room ? `, room for ${room}` : `, ${cap} at most while ${newest.serving} serve`;
    return move(to, `${measure}: ${replicas(trend.bound)} wanted for ${seconds(lasted)}${limited}`);
  }
  if (lasted < policy.scaleDownAfterMs)
    return hold(`${measure}: ${replicas(trend.bound)} enough for ${seconds(lasted)} of ${seconds(policy.scaleDownAfterMs)}`);
  const to = Math.max(trend.bound, Math.ceil(current / 2));
  return move(to, `${measure}: ${replicas(trend.bound)} enough for ${seconds(lasted)}${to > trend.bound ? ', halving at most' : ''}`);
}
