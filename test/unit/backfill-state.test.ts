// The backfill workflow's pure pieces: its state (counters summed over runs, stops with the commands that resolve
// them, Current Details) and its inbox (the shared decisions, without a live cut).
import { describe, expect, it } from 'vitest';
import type { PageOutcome } from '../../activities/page-consumer.js';
import { BackfillInbox } from '../../workflows/backfill-inbox.js';
import { BackfillState } from '../../workflows/backfill-state.js';

const audit = { actor: 'ana', reason: 'checked upstream' };

function outcome(applied: number, pages: number): PageOutcome {
  return {
    kind: 'page_limit',
    progress: { resumeCursor: 'c', appliedPosition: applied, version: pages },
    counters: {
      requests: pages,
      pages,
      chunks: pages,
      applied,
      recognised: 1,
      duplicates: 0,
      noEffect: 0,
      quarantined: 0,
    },
  };
}

function setup() {
  const state = new BackfillState({ consumerId: 'bf', filter: {} });
  const effects = { interrupted: 0, published: 0 };
  const inbox = new BackfillInbox(state, {
    interruptRun: () => void (effects.interrupted += 1),
    publish: () => void (effects.published += 1),
    warn: () => undefined,
  });
  return { state, inbox, effects };
}

describe('BackfillState', () => {
  it('adopts each run: the saved progress replaces the copy, counters add up', () => {
    const { state } = setup();
    state.adopt(outcome(10, 2));
    state.adopt(outcome(25, 3));
    expect(state.progress).toEqual({ resumeCursor: 'c', appliedPosition: 25, version: 3 });
    expect(state.counters).toMatchObject({ pages: 5, applied: 35, recognised: 2 });
    expect(state.runs).toBe(2);
  });

  it('a stop names the commands that resolve it, in the status and in Current Details', () => {
    const { state } = setup();
    state.stopFor('awaiting_gap_decision', 'reset_required (cursor_expired)', '2026-01-01T00:00:00.000Z');
    expect(state.status()).toMatchObject({ kind: 'backfill', phase: 'awaiting_gap_decision' });
    expect(state.stop?.resolveWith).toContain('resolve-gap --consumer bf --decision from_floor');
    expect(state.stop?.resolveWith).not.toContain('live_cut');
    const details = state.details(null);
    expect(details).toContain('## Backfill `bf`: awaiting_gap_decision');
    expect(details).toContain('resolve-gap --consumer bf --decision abandon \\\n');
    state.complete('caught up');
    expect(state.carried()).toMatchObject({ phase: 'completed', stop: null, ending: 'caught up' });
  });
});

describe('BackfillInbox', () => {
  it('refuses live_cut (no live cut for pages) and decisions out of phase; takes from_floor', () => {
    const { state, inbox } = setup();
    expect(() => inbox.validateGap({ ...audit, decision: 'from_floor' })).toThrow(
      'bf is backfilling, not awaiting_gap_decision',
    );
    state.phase = 'awaiting_gap_decision';
    expect(() => inbox.validateGap({ ...audit, decision: 'live_cut' })).toThrow('has no live cut');
    expect(() => inbox.acceptGap({ ...audit, decision: 'live_cut' })).toThrow('has no live cut');
    expect(inbox.gap).toBeNull();
    const ticket = inbox.acceptGap({ ...audit, decision: 'from_floor' });
    expect(inbox.takeGap()).toEqual({ ticket, value: { ...audit, decision: 'from_floor' } });
  });

  it('a pause interrupts the running page activity; an answered ticket returns the backfill status', () => {
    const { state, inbox, effects } = setup();
    inbox.requestPause(audit);
    expect(effects.interrupted).toBe(1);
    state.phase = 'awaiting_quarantine_decision';
    const ticket = inbox.acceptQuarantine({ ...audit, decision: 'release_terminal' });
    inbox.expectResult(ticket);
    inbox.settle(ticket, null);
    expect(inbox.takeResult(ticket)).toMatchObject({ kind: 'backfill', consumerId: 'bf' });
  });
});
