// The consumer workflow's state class, operator-input validation and the commands shown to operators:
// pure code the workflow drives, tested without Temporal.
import { describe, expect, it } from 'vitest';
import type { ConsumeOutcome, StreamCounters } from '../../activities/types.js';
import { resolveGapCommand, resumeCommand, wrapShellCommand } from '../../workflows/commands.js';
import { emptyCounters } from '../../activities/types.js';
import { formatTime } from '../../protocol/progress.js';
import { ConsumerState } from '../../workflows/consumer-state.js';
import type { ConsumerWorkflowInput } from '../../workflows/definitions.js';
import { parseGapResolution, parseQuarantineResolution, parseRebindRequest } from '../../workflows/validation.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');

const input: ConsumerWorkflowInput = {
  consumerId: 'c1',
  subscriptionId: 's1',
  filter: { markets: ['m1'] },
  initialStart: 'from_floor',
};

function outcome(
  kind: 'lease_expired' | 'rebound',
  position: number,
  counters: Partial<StreamCounters> = {},
): ConsumeOutcome {
  const committed = { position, token: `tok-${position}`, generation: 1, version: position, filterHash: 'sha256:x' };
  const base = { committed, counters: { ...emptyCounters(), ...counters } };
  return kind === 'rebound' ? { ...base, kind, generation: 1 } : { ...base, kind };
}

describe('ConsumerState', () => {
  it('a first start is the explicit initial start with the input filter; carried state with a token resumes', () => {
    expect(new ConsumerState(input).start).toEqual({ mode: 'from_floor', filter: { markets: ['m1'] } });
    const state = new ConsumerState(input);
    state.adopt(outcome('rebound', 3), T0);
    state.rebound();
    const { start, committed, phase } = new ConsumerState({ ...input, carried: state.carried() });
    expect({ start, committed, phase }).toEqual({
      start: { mode: 'resume' },
      committed: state.committed,
      phase: 'streaming',
    });
  });

  it('adopts each run: the committed summary replaces the copy, counters add up, the newest head and commit time win', () => {
    const state = new ConsumerState(input);
    state.backoffRounds = 3;
    state.adopt(
      outcome('lease_expired', 2, {
        sessions: 1,
        checkpointsCommitted: 2,
        eventsApplied: 5,
        acksSent: 2,
        lastHeadPosition: 9,
        lastCommitAt: '2026-01-01T00:00:00.000Z',
      }),
      T0,
    );
    state.adopt(
      outcome('lease_expired', 4, {
        sessions: 2,
        checkpointsCommitted: 1,
        eventsApplied: 1,
        duplicates: 1,
        acksSent: 1,
      }),
      T0 + 1_000,
    );
    expect(state.committed?.position).toBe(4);
    expect(state.runs).toBe(2);
    expect(state.backoffRounds).toBe(0);
    expect(state.counters).toEqual({
      sessions: 3,
      checkpointsCommitted: 3,
      eventsApplied: 6,
      duplicates: 1,
      acksSent: 3,
      lastHeadPosition: 9,
      lastCommitAt: '2026-01-01T00:00:00.000Z',
    });
  });

  it("a crashed run's heartbeat counters add to the totals; an error keeps its time until cleared", () => {
    const state = new ConsumerState(input);
    state.adopt(outcome('lease_expired', 10, { sessions: 1, checkpointsCommitted: 2, acksSent: 2 }), Date.now());
    state.addCrashedRunCounters({ ...emptyCounters(), sessions: 1, checkpointsCommitted: 3, acksSent: 3 });
    expect(state.counters).toMatchObject({ sessions: 2, checkpointsCommitted: 5, acksSent: 5 });
    expect(state.runs).toBe(1);

    state.noteError('streaming run lost its worker (heartbeat timeout)');
    expect(Date.parse(state.lastErrorAt ?? '')).not.toBeNaN();
    expect(state.status()).toMatchObject({ lastError: 'streaming run lost its worker (heartbeat timeout)' });
    expect(state.details(Date.now())).toContain(
      `Last error (${formatTime(state.lastErrorAt)}): streaming run lost its worker`,
    );
    state.clearError();
    expect(state.status()).toMatchObject({ lastError: null, lastErrorAt: null });
  });

  it('a committed rebind switches to its filter and resumes; a pending rebind is cleared', () => {
    const state = new ConsumerState(input);
    state.pendingRebind = { filter: { markets: ['m2'] }, requestedBy: 'ops' };
    state.start = { mode: 'rebind', filter: { markets: ['m2'] } };
    expect(state.runningPhase()).toBe('rebinding');
    state.rebound();
    expect(state).toMatchObject({
      filter: { markets: ['m2'] },
      start: { mode: 'resume' },
      pendingRebind: null,
      phase: 'streaming',
    });
  });

  it("adopts the database's view: its summary, binding and recorded start; the workflow re-derives none of them", () => {
    const view = (pendingStart: 'live_cut' | 'from_floor' | null, token: string | null = 'tok-5') => ({
      summary: { position: token ? 5 : null, token, generation: token ? 1 : null, version: 4, filterHash: null },
      filter: token ? { markets: ['m1', 'm3'] } : null,
      pendingStart,
      abandoned: false,
    });
    const state = new ConsumerState(input);
    state.adoptCommitted(view(null, null));
    // No checkpoint yet: the explicit first start stands.
    expect({ start: state.start, committed: state.committed }).toEqual({
      start: { mode: 'from_floor', filter: { markets: ['m1'] } },
      committed: null,
    });
    state.adoptCommitted(view(null));
    expect({ start: state.start, committed: state.committed, filter: state.filter }).toEqual({
      start: { mode: 'resume' },
      committed: view(null).summary,
      filter: { markets: ['m1', 'm3'] },
    });
    // A recorded decision's start, with the filter of a rebind still waiting for its first commit.
    state.pendingRebind = { filter: { markets: ['m2'] }, requestedBy: 'ops' };
    state.adoptCommitted(view('live_cut'));
    expect(state.start).toEqual({ mode: 'live_cut', filter: { markets: ['m2'] } });
    expect(state.runningPhase()).toBe('streaming');
    // A rebind is the workflow's own start (the database records none): a view without a recorded start keeps it.
    state.start = { mode: 'rebind', filter: { markets: ['m2'] } };
    state.adoptCommitted(view(null));
    expect(state.start).toEqual({ mode: 'rebind', filter: { markets: ['m2'] } });
  });

  it('a stop names the reason and every command that resolves it; proceeding clears it', () => {
    const state = new ConsumerState(input);
    state.stopFor('awaiting_gap_decision', 'reset_required (cursor_expired)', '2026-01-01T00:00:00.000Z');
    expect(state.stop).toEqual({
      phase: 'awaiting_gap_decision',
      reason: 'reset_required (cursor_expired)',
      since: '2026-01-01T00:00:00.000Z',
      resolveWith: ['from_floor', 'live_cut', 'abandon']
        .map((d) => resolveGapCommand('c1', d as 'from_floor'))
        .join('\n'),
    });
    state.stopFor('paused', 'paused by ops: upgrade', '2026-01-01T00:00:00.000Z');
    expect(state.stop?.resolveWith).toBe(resumeCommand('c1'));
    state.proceed();
    expect(state.stop).toBeNull();
    expect(state.phase).toBe('streaming');
  });

  it('Current Details puts the stop and its commands first, wrapped to the panel; then figures with their times', () => {
    const state = new ConsumerState(input);
    state.adopt(outcome('lease_expired', 40, { lastHeadPosition: 52, lastCommitAt: '2026-01-01T00:00:00.000Z' }), T0);
    state.stopFor('awaiting_gap_decision', 'reset_required (cursor_expired)', '2026-01-01T00:01:00.000Z');
    const details = state.details(T0 + 90_000);
    const lines = details.split('\n');
    expect(lines.slice(0, 8)).toEqual([
      '## Consumer `c1`: awaiting_gap_decision',
      '',
      '**Waiting since 00:01:00 UTC:** reset_required (cursor_expired)',
      '',
      'From a shell:',
      '',
      '```sh',
      'npx tsx cli/main.ts resolve-gap --consumer c1 --decision from_floor \\',
    ]);
    expect(details).toContain(wrapShellCommand(resolveGapCommand('c1', 'live_cut')));
    // Code lines do not wrap in the panel (prose does): each fits its width.
    const codeLines = details
      .split('```')
      .filter((_, i) => i % 2 === 1)
      .flatMap((block) => block.split('\n'));
    expect(Math.max(...codeLines.map((line) => line.length))).toBeLessThanOrEqual(73);
    expect(details).toContain('| position | 40, head 52, lag 12 (as of 00:00:00 UTC) |');
    // Waiting for a decision nothing is consumed: the rate is 0, not the last lease's.
    expect(details).toContain('| rate | 0.0 pos/s over the last minute (as of 00:01:30 UTC) |');
    expect(details).toContain('| last commit | 00:00:00 UTC; generation 1, next start from_floor |');
  });

  it('a progress reading refreshes position, head, lag and rate between leases; an older one is ignored', () => {
    const state = new ConsumerState(input);
    state.adopt(outcome('lease_expired', 1_000, { lastHeadPosition: 1_500 }), T0);
    state.noteReading({ position: 1_300, head: 1_604, at: '2026-01-01T00:00:20.000Z' });
    state.noteReading({ position: 1_200, head: 1_550, at: '2026-01-01T00:00:10.000Z' });
    const details = state.details(T0 + 20_000);
    expect(details).toContain('| position | 1,300, head 1,604, lag 304 (as of 00:00:20 UTC) |');
    expect(details).toContain('| rate | 15.0 pos/s over the last minute');
    // The reading and its rate window survive continue-as-new.
    const next = new ConsumerState({ ...input, carried: state.carried() });
    expect(next.details(T0 + 20_000)).toBe(details);
    // Paused, the head is the last one seen, labelled with its time, and the rate is 0.
    next.stopFor('paused', 'paused by ops: upgrade', '2026-01-01T00:00:30.000Z');
    expect(next.details(T0 + 30_000)).toContain('| position | 1,300, head 1,604, lag 304 (as of 00:00:20 UTC) |');
    expect(next.details(T0 + 30_000)).toContain('| rate | 0.0 pos/s over the last minute');
  });

  it('Current Details never shows the head behind a position committed past the last hello', () => {
    const state = new ConsumerState(input);
    state.adopt(outcome('lease_expired', 60, { lastHeadPosition: 52, lastCommitAt: '2026-01-01T00:00:00.000Z' }), T0);
    expect(state.details(T0 + 1_000)).toContain('| position | 60, head 60, lag 0 (as of 00:00:00 UTC) |');
  });
});

describe('operator input validation', () => {
  it('lists every problem of a decision', () => {
    expect(() => parseGapResolution({ decision: 'jump', actor: ' ', reason: '' })).toThrow(
      'invalid gap resolution: actor: actor is required: who takes this decision; reason: reason is required: why this decision is taken; ' +
        'decision: Invalid option: expected one of "from_floor"|"live_cut"|"abandon"',
    );
    expect(parseGapResolution({ decision: 'live_cut', actor: 'ops', reason: 'accept' })).toEqual({
      decision: 'live_cut',
      actor: 'ops',
      reason: 'accept',
    });
  });

  it('quarantine decisions may name events, but not an empty list', () => {
    expect(() => parseQuarantineResolution({ decision: 'retry', actor: 'a', reason: 'r', eventIds: [] })).toThrow(
      /eventIds, when given, names at least one event/,
    );
    expect(
      parseQuarantineResolution({ decision: 'release_terminal', actor: 'a', reason: 'r', eventIds: ['e1'] }).eventIds,
    ).toEqual(['e1']);
  });

  it('a rebind filter is the wire filter: unknown fields and non-decimal notionals are refused', () => {
    expect(() => parseRebindRequest({ filter: { market: ['m1'] }, requestedBy: 'ops' })).toThrow(
      /invalid rebind request: filter/,
    );
    expect(() => parseRebindRequest({ filter: { minNotional: '1e6' }, requestedBy: 'ops' })).toThrow(
      /filter.minNotional/,
    );
    expect(() => parseRebindRequest({ filter: {}, requestedBy: '' })).toThrow(/requestedBy is required/);
  });
});

describe('operator commands', () => {
  it('are runnable as printed, quoting a consumer id that needs it', () => {
    expect(resolveGapCommand('c1', 'from_floor')).toBe(
      'npx tsx cli/main.ts resolve-gap --consumer c1 --decision from_floor --actor "$USER" --reason "<why>"',
    );
    expect(resumeCommand("desk 1's")).toBe(
      `npx tsx cli/main.ts resume --consumer 'desk 1'\\''s' --actor "$USER" --reason "<why>"`,
    );
  });
});
