// The backfill workflow's pure pieces: its state (counters summed over runs, stops with the commands that resolve
// them, Current Details, the target fixed when it starts and what follows reaching it) and its inbox (the shared
// decisions, without a live cut).
import { describe, expect, it } from 'vitest';
import type { PageOutcome } from '../../activities/page-consumer.js';
import { BackfillInbox } from '../../workflows/backfill-inbox.js';
import { appliedText, BackfillState, headWaitMs, targetText } from '../../workflows/backfill-state.js';
import type { BackfillWorkflowInput } from '../../workflows/definitions.js';

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

/** A run's outcome of a run with a target (every new run has one); `pages` pages, ending at `applied`. */
function targeted(
  kind: 'target_reached' | 'caught_up' | 'page_limit',
  applied: number,
  target: number,
  head: number,
  pages = 1,
): PageOutcome {
  const base = outcome(applied, pages);
  const stop =
    kind === 'target_reached'
      ? { kind, by: 'applied' as const }
      : kind === 'caught_up'
        ? { kind, attempts: 3 }
        : { kind };
  return {
    ...base,
    ...stop,
    target: { position: target, historyId: 'h1' },
    sourceHistory: { id: 'h1', floor: 1, head },
  };
}

function setup(input: Partial<BackfillWorkflowInput> = {}) {
  const state = new BackfillState({ consumerId: 'bf', filter: {}, ...input });
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

describe('BackfillState: the target', () => {
  const at = '2026-01-01T00:00:00.000Z';

  it('is fixed by the first run (the head its first page saw), kept across runs and continue-as-new', () => {
    const { state } = setup();
    expect(state.runTarget()).toBe('head');
    expect(appliedText(state.status())).toBe("applied nothing yet (target: the source's head at the first page)");
    state.adopt(targeted('page_limit', 900, 1750, 1750), at);
    expect(state.target).toEqual({ position: 1750, historyId: 'h1', source: 'head', fixedAt: at });
    expect(state.runTarget()).toEqual({ position: 1750, historyId: 'h1' });
    // A later run reports the same target and a higher head: neither moves the target.
    state.adopt(targeted('page_limit', 1746, 1750, 1790), '2026-01-01T00:01:00.000Z');
    expect(state.target?.position).toBe(1750);
    expect(state.sourceHead).toBe(1790);
    expect(appliedText(state.status())).toBe('applied 1,746 of 1,750');
    expect(targetText(state.status())).toBe("1,750 (the source's head at the first page, 00:00:00 UTC; history h1)");
    const carried = new BackfillState({ consumerId: 'bf', filter: {}, carried: state.carried() });
    expect(carried.runTarget()).toEqual({ position: 1750, historyId: 'h1' });
    expect(carried.details(null)).toContain('| progress | applied 1,746 of 1,750 |');
    expect(carried.details(null)).toContain('| source head | 1,790 (as the last run saw it) |');
  });

  it('--until is the target from the start, bound to the history of its first run', () => {
    const { state } = setup({ until: 5000 });
    expect(state.runTarget()).toEqual({ position: 5000, historyId: null });
    expect(targetText(state.status())).toBe('5,000 (given with --until)');
    state.adopt(targeted('page_limit', 100, 5000, 1750), at);
    expect(state.target).toEqual({ position: 5000, historyId: 'h1', source: 'until', fixedAt: null });
    expect(state.status()).toMatchObject({ until: 5000, tail: false });
  });

  it('reached: completes naming the target, or hands over with --then-stream', () => {
    const { state } = setup();
    state.adopt(targeted('target_reached', 1752, 1750, 1760), at);
    expect(state.afterReachingHead(targeted('target_reached', 1752, 1750, 1760))).toBe('completed');
    expect(state.ending).toBe("reached its target 1,750 (the source's head when it started), applied position 1,752");

    const streamed = setup({ thenStream: { subscriptionId: 's1' } }).state;
    streamed.adopt(targeted('target_reached', 1750, 1750, 1760), at);
    expect(streamed.afterReachingHead(targeted('target_reached', 1750, 1750, 1760))).toBe('hand_over');
    expect(streamed.phase).toBe('handing_over');
    expect(streamed.details(null)).toContain('at the target, hand over to the live stream consumer (subscription s1)');
  });

  it('an older run without a target that caught up completes at the head, as its history was written', () => {
    const { state } = setup();
    const old: PageOutcome = { ...outcome(40, 1), kind: 'caught_up', attempts: 3 };
    state.adopt(old);
    expect(state.target).toBeNull();
    expect(state.afterReachingHead(old)).toBe('completed');
    expect(state.ending).toBe('caught up at the head, applied position 40');
  });

  it('below the target at the head, and tailing: waits at the head, longer while little comes', () => {
    const { state } = setup({ until: 5000 });
    const below = targeted('caught_up', 1750, 5000, 1750);
    state.adopt(below, at);
    expect(state.afterReachingHead(below)).toBe('at_head');
    expect(state.atHeadReason(4000)).toBe(
      "the source's head 1,750 is below the target 5,000 (applied 1,750); the next page in 4 s",
    );

    const tail = setup({ tail: true, until: 10, thenStream: { subscriptionId: 's' } }).state;
    // A tailing backfill has no target: every run works to the head its first page saw, and never completes.
    expect(tail.target).toBeNull();
    expect(tail.runTarget()).toBe('head');
    const reached = targeted('target_reached', 1750, 1750, 1750);
    tail.adopt(reached, at);
    expect(tail.target).toBeNull();
    expect(tail.runTarget()).toBe('head');
    expect(tail.afterReachingHead(reached)).toBe('at_head');
    expect(tail.phase).toBe('at_head');
    expect(appliedText(tail.status())).toBe('applied 1,750, head 1,750 (tailing)');
    expect(tail.atHeadReason(1000)).toBe("tailing: at the source's head 1,750 (applied 1,750); the next page in 1 s");
    expect(tail.details(null)).toContain('| then | keep paging as the history grows (tailing) |');

    const tuning = { backoffInitialMs: 1000, backoffMaxMs: 60_000 };
    expect([0, 1, 2, 6, 7, 100].map((n) => headWaitMs(n, tuning))).toEqual([1000, 2000, 4000, 60_000, 60_000, 60_000]);
    tail.headWaits = 5;
    tail.afterReachingHead(targeted('target_reached', 1760, 1760, 1760, 1));
    expect(tail.headWaits).toBe(5);
    // More than a page came while it waited: the next wait starts short again.
    tail.afterReachingHead(targeted('target_reached', 2900, 2900, 2900, 3));
    expect(tail.headWaits).toBe(0);
  });

  it('a from_floor decision fixes a head target again; an --until target keeps its position, unbound', () => {
    const head = setup().state;
    head.adopt(targeted('page_limit', 10, 1750, 1750), at);
    head.restartFromFloor();
    expect(head.target).toBeNull();
    expect(head.runTarget()).toBe('head');

    const until = setup({ until: 500 }).state;
    until.adopt(targeted('page_limit', 10, 500, 1750), at);
    until.restartFromFloor();
    expect(until.runTarget()).toEqual({ position: 500, historyId: null });
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
