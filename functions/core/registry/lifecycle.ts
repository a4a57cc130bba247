import type { VersionState } from '../../../shared/contracts/registry.js';
import { isId } from '../../../shared/ids.js';

/**
 * The lifecycle of a model version (docs/design.md section 7; docs/registry.md): a pure state machine. Every
 * state change of the registry asks `transition` first, inside the transaction that locked the version, so that
 * no route, and no later slice, can move a version past a step it did not take.
 *
 *   candidate -> documented (licence, provenance) -> verified (digests) -> evaluated (suites) -> approved (a person)
 *     -> canary -> gated (readiness and benchmark gate) -> promoted (a person) -> stable (a person)
 *   a failed verification, evaluation or gate, or a person's rejection before approval: rejected
 *   a person's rollback from canary onwards: rolled_back
 */

/** Who acts: an API token (`tok_...`, a person), a machine or `system` (the controller). */
type Actor = { actor: string };

export type LifecycleEvent =
  | ({ type: 'document' } & Actor)
  | ({ type: 'verify'; passed: boolean } & Actor)
  | ({ type: 'evaluate'; passed: boolean } & Actor)
  | ({ type: 'approve' } & Actor)
  | ({ type: 'reject' } & Actor)
  | ({ type: 'start_canary' } & Actor)
  | ({ type: 'gate'; passed: boolean } & Actor)
  | ({ type: 'promote' } & Actor)
  | ({ type: 'release' } & Actor)
  | ({ type: 'rollback' } & Actor);
type LifecycleEventType = LifecycleEvent['type'];

export type Transition = { ok: true; next: VersionState } | { ok: false; reason: string };

/** The states in the order a version passes them; `rejected` and `rolled_back` end a version's life. */
const ORDER: readonly VersionState[] = ['candidate', 'documented', 'verified', 'evaluated', 'approved', 'canary', 'gated', 'promoted', 'stable'];

/** Decisions only a person may take: promotion is never automatic, and neither is its undoing. */
const HUMAN_ONLY: ReadonlySet<LifecycleEventType> = new Set(['approve', 'reject', 'promote', 'rollback', 'release']);

interface Rule {
  /** The states the event applies in. */
  from: readonly VersionState[];
  /** Where it leads; an outcome event (verify, evaluate, gate) leads to `rejected` when it failed. */
  to: VersionState;
  /** Why it does not apply before its first `from` state. */
  early: string;
  /** Why it does not apply after its last one. */
  late: string;
}

const RULES: Record<LifecycleEventType, Rule> = {
  document: { from: ['candidate'], to: 'documented', early: '', late: 'licence and provenance are already recorded' },
  verify: {
    from: ['documented'],
    to: 'verified',
    early: "a version's licence and provenance must be recorded before its digests are verified",
    late: "the version's digests are already verified",
  },
  // Each further suite run counts: a failed one rejects an evaluated version too.
  evaluate: {
    from: ['verified', 'evaluated'],
    to: 'evaluated',
    early: "a version's digests must be verified before it is evaluated",
    late: 'an approved version is not evaluated again',
  },
  approve: { from: ['evaluated'], to: 'approved', early: 'a version must be evaluated before it is approved', late: 'the version is already approved' },
  reject: {
    from: ['candidate', 'documented', 'verified', 'evaluated'],
    to: 'rejected',
    early: '',
    late: 'an approved version is not rejected: point its aliases elsewhere, or roll it back once it serves',
  },
  start_canary: {
    from: ['approved'],
    to: 'canary',
    early: 'a version must be approved before its canary starts',
    late: "the version's canary has already started",
  },
  gate: {
    from: ['canary'],
    to: 'gated',
    early: 'a version must be in canary before its readiness and benchmark gate',
    late: 'the version has already passed its readiness and benchmark gate',
  },
  promote: {
    from: ['gated'],
    to: 'promoted',
    early: "a version must pass its canary's readiness and benchmark gate before it is promoted",
    late: 'the version is already promoted',
  },
  release: {
    from: ['promoted'],
    to: 'stable',
    early: 'a version must be promoted and observed before it is released as stable',
    late: 'the version is already released as stable',
  },
  rollback: {
    from: ['canary', 'gated', 'promoted', 'stable'],
    to: 'rolled_back',
    early: 'only a version in canary or further on can be rolled back',
    late: '',
  },
};

const ENDED: Partial<Record<VersionState, string>> = {
  rejected: 'the version was rejected; register a new version',
  rolled_back: 'the version was rolled back; register a new version',
};

/** Whether an actor is a person: an API token, never `system` or a machine. */
function isHuman(actor: string): boolean {
  return isId('token', actor);
}

/** Where `event` takes a version in `state`, or why it cannot (a sentence for the operator). */
export function transition(state: VersionState, event: LifecycleEvent): Transition {
  if (HUMAN_ONLY.has(event.type) && !isHuman(event.actor)) {
    return { ok: false, reason: `${event.type} is a person's decision: it needs an API token, never ${event.actor} (promotion is never automatic)` };
  }
  const ended = ENDED[state];
  if (ended) return { ok: false, reason: ended };
  const rule = RULES[event.type];
  if (!rule.from.includes(state)) {
    const tooEarly = ORDER.indexOf(state) < ORDER.indexOf(rule.from[0]!);
    return { ok: false, reason: `${tooEarly ? rule.early : rule.late} (it is ${state})` };
  }
  const failed = 'passed' in event && !event.passed;
  return { ok: true, next: failed ? 'rejected' : rule.to };
}

/** Whether an alias may point at a version in `state`: approved, or further on and not rolled back. */
export function aliasable(state: VersionState): boolean {
  return ORDER.indexOf(state) >= ORDER.indexOf('approved');
}
