// The consumer workflow's inbox: what its signal and update handlers accept or refuse, and the tickets its
// update callers wait on. Pure code the workflow drives, tested without Temporal.
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { emptyCounters } from '../../activities/types.js';
import { ConsumerInbox, SUPERSEDED, type InboxEffects } from '../../workflows/consumer-inbox.js';
import { ConsumerState } from '../../workflows/consumer-state.js';
import type { ConsumerPhase, GapResolution, RebindRequest } from '../../workflows/definitions.js';
import { InvalidOperatorInput } from '../../workflows/validation.js';

const committed = { position: 7, token: 'tok-7', generation: 1, version: 3, filterHash: 'sha256:x' };

function setup(phase: ConsumerPhase = 'streaming') {
  const state = new ConsumerState({
    consumerId: 'c1',
    subscriptionId: 's1',
    filter: { markets: ['m1'] },
    initialStart: 'from_floor',
    carried: { committed, phase, pendingRebind: null, stop: null, lastError: null, counters: emptyCounters(), runs: 1 },
  });
  const calls: string[] = [];
  const effects: InboxEffects = {
    interruptRun: () => calls.push('interruptRun'),
    publish: () => calls.push('publish'),
    warn: (message) => calls.push(`warn: ${message}`),
  };
  return { state, inbox: new ConsumerInbox(state, effects), calls };
}

const gap = (decision: GapResolution['decision'], actor = 'ops'): GapResolution => ({
  decision,
  actor,
  reason: 'history expired',
});
const rebind: RebindRequest = { filter: { markets: ['m2'] }, requestedBy: 'schedule' };

/** The failure takeResult throws, or null when it returns the status. */
function resultFailure(inbox: ConsumerInbox, ticket: number): ApplicationFailure | null {
  try {
    inbox.takeResult(ticket);
    return null;
  } catch (error) {
    if (error instanceof ApplicationFailure) return error;
    throw error;
  }
}

describe('ConsumerInbox tickets', () => {
  it('an applied decision answers its update with the status; a failed one with why, as DecisionNotApplied', () => {
    const { inbox, state } = setup('awaiting_gap_decision');
    const applied = inbox.acceptGap(gap('live_cut'));
    inbox.expectResult(applied);
    expect(inbox.hasResult(applied)).toBe(false);
    inbox.settle(applied, null);
    expect(inbox.hasResult(applied)).toBe(true);
    expect(inbox.takeResult(applied)).toEqual(state.status());
    expect(inbox.hasResult(applied)).toBe(false);

    const refused = inbox.acceptGap(gap('from_floor'));
    inbox.expectResult(refused);
    inbox.settle(refused, 'decision not recorded: database down');
    const failure = resultFailure(inbox, refused);
    expect(failure).toMatchObject({
      type: 'DecisionNotApplied',
      message: 'decision not recorded: database down',
      nonRetryable: true,
    });
  });

  it('a decision nobody awaits (a signal) leaves no result behind', () => {
    const { inbox } = setup('awaiting_gap_decision');
    const ticket = inbox.acceptGap(gap('live_cut'));
    inbox.settle(ticket, null);
    expect(inbox.hasResult(ticket)).toBe(false);
  });

  it('a later decision supersedes an unapplied one: its update fails, the loop takes only the later one', () => {
    const { inbox } = setup('awaiting_gap_decision');
    const first = inbox.acceptGap(gap('live_cut', 'alice'));
    inbox.expectResult(first);
    const second = inbox.acceptGap(gap('from_floor', 'bob'));
    inbox.expectResult(second);
    expect(second).not.toBe(first);
    expect(resultFailure(inbox, first)).toMatchObject({ type: 'DecisionNotApplied', message: SUPERSEDED });
    expect(inbox.hasResult(second)).toBe(false);
    expect(inbox.takeGap()).toEqual({ ticket: second, value: gap('from_floor', 'bob') });
    expect(inbox.takeGap()).toBeNull();
  });
});

describe('ConsumerInbox phase checks', () => {
  it('a decision is refused outside its waiting phase, naming the phase it is in', () => {
    const { inbox } = setup('streaming');
    expect(() => inbox.acceptGap(gap('live_cut'))).toThrow(InvalidOperatorInput);
    expect(() => inbox.validateGap(gap('live_cut'))).toThrow(
      'consumer c1 is streaming, not awaiting_gap_decision: no gap decision to take now',
    );
    expect(() => inbox.validateBinding({ decision: 'retry', actor: 'ops', reason: 'r' })).toThrow(
      'consumer c1 is streaming, not awaiting_binding_decision: no binding decision to take now',
    );
    expect(() => inbox.validateQuarantine({ decision: 'retry', actor: 'ops', reason: 'r' })).toThrow(
      'consumer c1 is streaming, not awaiting_quarantine_decision: no quarantine decision to take now',
    );
    expect(inbox.gap).toBeNull();
  });

  it('each decision is taken in its own phase only', () => {
    const { inbox } = setup('awaiting_binding_decision');
    expect(() => inbox.acceptGap(gap('live_cut'))).toThrow(/not awaiting_gap_decision/);
    const ticket = inbox.acceptBinding({ decision: 'retry', actor: 'ops', reason: 'r' });
    expect(inbox.takeBinding()?.ticket).toBe(ticket);
  });

  it('invalid input is refused before the phase is checked, listing the problems', () => {
    const { inbox } = setup('awaiting_gap_decision');
    expect(() => inbox.validateGap({ decision: 'jump', actor: 'ops', reason: 'r' } as never)).toThrow(
      /invalid gap resolution: decision/,
    );
  });

  it('an invalid signal is ignored and shown as the last error', () => {
    const { inbox, state, calls } = setup('streaming');
    inbox.ignoreInvalid('resolveGap', () => inbox.acceptGap(gap('live_cut')));
    expect(state.lastError).toBe(
      'ignored resolveGap signal: consumer c1 is streaming, not awaiting_gap_decision: no gap decision to take now',
    );
    expect(calls).toEqual(['warn: ignored invalid signal', 'publish']);
    inbox.ignoreInvalid('pause', () => inbox.requestPause({ actor: '', reason: 'r' }));
    expect(inbox.pause).toBeNull();
    expect(state.lastError).toMatch(/^ignored pause signal: invalid pause\/resume request: actor/);
  });

  it('a pause stops the running lease and ends a backoff; a resume clears it', () => {
    const { inbox, calls } = setup('backoff');
    inbox.requestPause({ actor: 'ops', reason: 'upgrade' });
    expect(inbox.pause).toEqual({ actor: 'ops', reason: 'upgrade' });
    expect(inbox.wakeups).toBe(1);
    expect(calls).toEqual(['interruptRun']);
    inbox.requestResume({ actor: 'ops', reason: 'done' });
    expect(inbox.pause).toBeNull();
    expect(inbox.takeResume()).toEqual({ actor: 'ops', reason: 'done' });
    expect(inbox.takeResume()).toBeNull();
  });
});

describe('ConsumerInbox rebind', () => {
  it('accepts a rebind of a running consumer with a checkpoint: stops the lease, wakes a backoff, shows it', () => {
    const { inbox, state, calls } = setup('backoff');
    expect(inbox.rebindRefusal()).toBeNull();
    inbox.validateRebind(rebind);
    inbox.acceptRebind(rebind);
    expect(state.pendingRebind).toEqual({ filter: { markets: ['m2'] }, requestedBy: 'schedule' });
    expect(inbox.wakeups).toBe(1);
    expect(calls).toEqual(['interruptRun', 'publish']);
  });

  it('names why a rebind cannot be taken now', () => {
    const refusal = (prepare: (state: ConsumerState) => void, phase: ConsumerPhase = 'streaming') => {
      const { inbox, state } = setup(phase);
      prepare(state);
      return inbox.rebindRefusal();
    };
    expect(refusal(() => {}, 'rebinding')).toBe('consumer c1 is already rebinding');
    expect(refusal((s) => (s.pendingRebind = { filter: {}, requestedBy: 'ops' }))).toBe(
      'consumer c1 is already rebinding',
    );
    expect(refusal((s) => s.stopFor('paused', 'paused by ops: upgrade', '2026-01-01T00:00:00.000Z'))).toBe(
      'consumer c1 is paused (paused by ops: upgrade): resolve that first',
    );
    expect(refusal(() => {}, 'awaiting_gap_decision')).toBe('consumer c1 is awaiting_gap_decision: resolve that first');
    expect(refusal((s) => (s.committed = null))).toBe(
      'consumer c1 has no committed checkpoint yet: nothing to rebind from',
    );
    expect(refusal((s) => (s.start = { mode: 'live_cut', filter: {} }))).toBe(
      'consumer c1 has an explicit live_cut start pending its first commit',
    );
  });

  it('an update is refused with the reason; the state is left as it was', () => {
    const { inbox, state, calls } = setup('paused');
    expect(() => inbox.validateRebind(rebind)).toThrow('consumer c1 is paused: resolve that first');
    expect(() => inbox.acceptRebind(rebind)).toThrow(InvalidOperatorInput);
    expect(state.pendingRebind).toBeNull();
    expect(calls).toEqual([]);
  });

  it('a refused signal shows as the last error and names the requester to tell', () => {
    const { inbox, state, calls } = setup('awaiting_gap_decision');
    expect(inbox.rebindBySignal({ ...rebind, replyTo: 'rebind-wf-1' })).toEqual({
      replyTo: 'rebind-wf-1',
      rejection: {
        consumerId: 'c1',
        phase: 'awaiting_gap_decision',
        reason: 'consumer c1 is awaiting_gap_decision: resolve that first',
      },
    });
    expect(state.lastError).toBe('refused rebind: consumer c1 is awaiting_gap_decision: resolve that first');
    expect(calls).toEqual(['publish']);
    expect(inbox.rebindBySignal(rebind)?.replyTo).toBeNull();
  });

  it('an accepted signal has nobody to answer', () => {
    const { inbox, state } = setup('streaming');
    expect(inbox.rebindBySignal({ ...rebind, replyTo: 'rebind-wf-1' })).toBeNull();
    expect(state.pendingRebind?.filter).toEqual({ markets: ['m2'] });
  });
});
