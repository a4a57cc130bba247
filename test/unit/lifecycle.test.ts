import { describe, expect, it } from 'vitest';
import { aliasable, transition, type LifecycleEvent } from '../../functions/core/registry/lifecycle.js';
import { rollbackTarget, type AliasMove } from '../../functions/core/registry/alias-history.js';
import { VersionState } from '../../shared/contracts/registry.js';
import { newId } from '../../shared/ids.js';

const PERSON = newId('token');

/** Every event, the outcome events both ways: the columns of the table below. */
const EVENTS = {
  document: { type: 'document' },
  'verify+': { type: 'verify', passed: true },
  'verify-': { type: 'verify', passed: false },
  'evaluate+': { type: 'evaluate', passed: true },
  'evaluate-': { type: 'evaluate', passed: false },
  approve: { type: 'approve' },
  reject: { type: 'reject' },
  start_canary: { type: 'start_canary' },
  'gate+': { type: 'gate', passed: true },
  'gate-': { type: 'gate', passed: false },
  promote: { type: 'promote' },
  release: { type: 'release' },
  rollback: { type: 'rollback' },
} as const;
type Column = keyof typeof EVENTS;

const event = (column: Column, actor: string) => ({ ...EVENTS[column], actor }) as LifecycleEvent;

/**
 * The whole machine, written out by hand (docs/registry.md): where each event takes a version in each state when
 * a person acts, `-` where it is refused. Not derived from the code under test.
 */
const TABLE: Record<VersionState, Record<Column, VersionState | '-'>> = {
  candidate: {
    document: 'documented',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: 'rejected',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
  documented: {
    document: '-',
    'verify+': 'verified',
    'verify-': 'rejected',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: 'rejected',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
  verified: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': 'evaluated',
    'evaluate-': 'rejected',
    approve: '-',
    reject: 'rejected',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
  evaluated: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': 'evaluated',
    'evaluate-': 'rejected',
    approve: 'approved',
    reject: 'rejected',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
  approved: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: 'canary',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
  canary: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: '-',
    'gate+': 'gated',
    'gate-': 'rejected',
    promote: '-',
    release: '-',
    rollback: 'rolled_back',
  },
  gated: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: 'promoted',
    release: '-',
    rollback: 'rolled_back',
  },
  promoted: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: 'stable',
    rollback: 'rolled_back',
  },
  stable: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: 'rolled_back',
  },
  rolled_back: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
  rejected: {
    document: '-',
    'verify+': '-',
    'verify-': '-',
    'evaluate+': '-',
    'evaluate-': '-',
    approve: '-',
    reject: '-',
    start_canary: '-',
    'gate+': '-',
    'gate-': '-',
    promote: '-',
    release: '-',
    rollback: '-',
  },
};

/** Decisions only a person may take. */
const HUMAN_ONLY = new Set(['approve', 'reject', 'promote', 'release', 'rollback']);

describe('the model version lifecycle', () => {
  it('covers every state of the contract', () => {
    expect(Object.keys(TABLE).sort()).toEqual([...VersionState.options].sort());
  });

  for (const state of VersionState.options) {
    it(`answers every event in ${state} as the table says, with a reason for each refusal`, () => {
      for (const column of Object.keys(EVENTS) as Column[]) {
        const result = transition(state, event(column, PERSON));
        const expected = TABLE[state][column];
        if (expected === '-') {
          expect(result.ok, `${state} + ${column}`).toBe(false);
          if (!result.ok) expect(result.reason, `${state} + ${column}`).toMatch(/^[a-z].{20,}/);
        } else {
          expect(result, `${state} + ${column}`).toEqual({ ok: true, next: expected });
        }
      }
    });
  }

  it('never lets the system (or a machine) approve, reject, promote, release or roll back, in any state', () => {
    for (const actor of ['system', newId('machine')]) {
      for (const state of VersionState.options) {
        for (const column of Object.keys(EVENTS) as Column[]) {
          const result = transition(state, event(column, actor));
          if (HUMAN_ONLY.has(EVENTS[column].type)) {
            expect(result, `${actor}: ${state} + ${column}`).toEqual({ ok: false, reason: expect.stringContaining("a person's decision") });
          } else {
            // What a person may do there, the system may do too (and is refused where a person is).
            expect(result.ok, `${actor}: ${state} + ${column}`).toBe(TABLE[state][column] !== '-');
          }
        }
      }
    }
  });

  it('explains a skipped step in words an operator understands', () => {
    expect(transition('verified', { type: 'approve', actor: PERSON })).toEqual({
      ok: false,
      reason: 'a version must be evaluated before it is approved (it is verified)',
    });
    expect(transition('candidate', { type: 'verify', passed: true, actor: PERSON })).toEqual({
      ok: false,
      reason: "a version's licence and provenance must be recorded before its digests are verified (it is candidate)",
    });
    expect(transition('approved', { type: 'approve', actor: PERSON })).toEqual({ ok: false, reason: 'the version is already approved (it is approved)' });
    expect(transition('rejected', { type: 'document', actor: PERSON })).toEqual({ ok: false, reason: 'the version was rejected; register a new version' });
  });

  it('lets an alias point only at approved versions and beyond, never a rolled-back or rejected one', () => {
    const yes = VersionState.options.filter((state) => aliasable(state));
    expect(yes).toEqual(['approved', 'canary', 'gated', 'promoted', 'stable']);
  });
});

describe('alias rollback', () => {
  const set = (from: string | null, to: string): AliasMove => ({ fromVersionId: from, toVersionId: to, rollback: false });
  const back = (from: string, to: string): AliasMove => ({ fromVersionId: from, toVersionId: to, rollback: true });

  it('walks back one move per rollback, and stops at the move that created the alias', () => {
    const history = [set('v2', 'v3'), set('v1', 'v2'), set(null, 'v1')];
    expect(rollbackTarget(history)).toBe('v2');
    expect(rollbackTarget([back('v3', 'v2'), ...history])).toBe('v1');
    expect(rollbackTarget([back('v2', 'v1'), back('v3', 'v2'), ...history])).toBeNull();
    expect(rollbackTarget([set(null, 'v1')])).toBeNull();
    expect(rollbackTarget([])).toBeNull();
  });

  it('undoes a move made after a rollback first', () => {
    // v1 -> v2, rolled back to v1, then moved to v4: a rollback goes to v1, then to nothing.
    const history = [set('v1', 'v4'), back('v2', 'v1'), set('v1', 'v2'), set(null, 'v1')];
    expect(rollbackTarget(history)).toBe('v1');
    expect(rollbackTarget([back('v4', 'v1'), ...history])).toBeNull();
  });
});
