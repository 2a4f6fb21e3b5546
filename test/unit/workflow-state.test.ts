// The consumer workflow's state class, operator-input validation and the commands shown to operators:
// pure code the workflow drives, tested without Temporal.
import { describe, expect, it } from 'vitest';
import type { CommittedTotals, ConsumeOutcome, RunReport, StreamCounters } from '../../activities/types.js';
import { resolveGapCommand, resumeCommand, wrapShellCommand } from '../../workflows/commands.js';
import { emptyCounters } from '../../activities/types.js';
import { formatTime } from '../../protocol/progress.js';
import { ConsumerState, consumerTotals } from '../../workflows/consumer-state.js';
import type { ConsumerWorkflowInput } from '../../workflows/definitions.js';
import { parseGapResolution, parseQuarantineResolution, parseRebindRequest } from '../../workflows/validation.js';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');

/** A run's report: its lease epoch, counters and (when it read them) the database's totals. */
function run(leaseEpoch: number, counters: Partial<StreamCounters>, totals: CommittedTotals | null = null): RunReport {
  return { leaseEpoch, counters: { ...emptyCounters(), ...counters }, totals };
}

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
    state.endRun(run(2, { sessions: 1, checkpointsCommitted: 3, acksSent: 3 }), Date.now());
    expect(state.counters).toMatchObject({ sessions: 2, checkpointsCommitted: 5, acksSent: 5 });
    expect(state.runs).toBe(2);

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
      'node dist/cli/main.js resolve-gap --consumer c1 --decision from_floor \\',
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
    expect(details).toContain('| last commit | 00:00:00 UTC, version 40; generation 1, next start from_floor |');
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

  it("a running run's report shows in the totals at once and its ending replaces it; a late signal of it is ignored", () => {
    const state = new ConsumerState(input);
    state.adopt(
      outcome('lease_expired', 10, { sessions: 1, checkpointsCommitted: 2, eventsApplied: 4, acksSent: 2 }),
      T0,
    );
    const at = (s: number) => new Date(T0 + s * 1_000).toISOString();
    const live = run(7, { sessions: 2, checkpointsCommitted: 5, eventsApplied: 9, acksSent: 5, lastCommitAt: at(19) });
    state.noteReading({ position: 20, head: 30, at: at(20), run: live });
    expect(state.totals()).toMatchObject({ sessions: 3, checkpointsCommitted: 7, eventsApplied: 13, acksSent: 7 });
    // An older reading of the same run changes nothing.
    state.noteReading({ position: 15, head: 30, at: at(15), run: run(7, { sessions: 2, checkpointsCommitted: 1 }) });
    expect(state.totals()).toMatchObject({ checkpointsCommitted: 7, lastCommitAt: at(19) });
    // The run's ending carries its final counters: they replace the live ones, never add to them.
    state.endRun(run(7, { sessions: 2, checkpointsCommitted: 6, eventsApplied: 11, acksSent: 6 }), T0 + 25_000);
    expect(state.live).toBeNull();
    expect(state.totals()).toMatchObject({ sessions: 3, checkpointsCommitted: 8, eventsApplied: 15, acksSent: 8 });
    // Its progress signal, delivered after its ending, is not taken as the next run's.
    state.noteReading({ position: 22, head: 30, at: at(24), run: run(7, { sessions: 2, checkpointsCommitted: 6 }) });
    expect(state.live).toBeNull();
    expect(state.totals()).toMatchObject({ checkpointsCommitted: 8 });
    // A crash's last heartbeat may be behind the live report: the further one is what the run did.
    state.noteReading({ position: 30, head: 30, at: at(40), run: run(8, { sessions: 1, checkpointsCommitted: 4 }) });
    state.endRun(run(8, { sessions: 1, checkpointsCommitted: 2 }), T0 + 50_000);
    expect(state.totals()).toMatchObject({ sessions: 4, checkpointsCommitted: 12 });
    expect(state.runs).toBe(3);
    // An attempt the server retried goes on from its predecessor's counters under a new lease epoch: a late signal
    // of the attempt it took over from is behind it, and ignored.
    state.noteReading({ position: 40, head: 40, at: at(60), run: run(10, { sessions: 2, checkpointsCommitted: 3 }) });
    state.noteReading({ position: 35, head: 40, at: at(61), run: run(9, { sessions: 1, checkpointsCommitted: 1 }) });
    expect(state.totals()).toMatchObject({ sessions: 6, checkpointsCommitted: 15 });
  });

  it("the database's totals and version count checkpoints and events wherever a run reported them, newest version first", () => {
    const state = new ConsumerState(input);
    const at = (s: number) => new Date(T0 + s * 1_000).toISOString();
    // The runs' own counts until a run reports the database's (an older worker's reports carry none).
    state.endRun(run(1, { checkpointsCommitted: 3, eventsApplied: 5, sessions: 1 }), T0);
    expect(state.totals()).toMatchObject({ checkpointsCommitted: 3, eventsApplied: 5, version: null });
    // A run whose predecessor died before reporting its last commits: the database counted them all the same.
    const totals = { version: 12, checkpointsCommitted: 11, eventsApplied: 40 };
    state.noteReading({
      position: 50,
      head: 60,
      at: at(10),
      run: run(2, { sessions: 1, checkpointsCommitted: 1 }, totals),
    });
    expect(state.totals()).toMatchObject({ checkpointsCommitted: 11, eventsApplied: 40, version: 12, sessions: 2 });
    // A report at an older version never takes them back; the ending's newer one moves them on.
    state.endRun(run(2, { sessions: 1, checkpointsCommitted: 2 }, { ...totals, version: 11 }), T0 + 20_000);
    expect(state.totals()).toMatchObject({ checkpointsCommitted: 11, version: 12 });
    state.endRun(run(3, {}, { version: 14, checkpointsCommitted: 13, eventsApplied: 45 }), T0 + 30_000);
    expect(state.totals()).toMatchObject({ checkpointsCommitted: 13, eventsApplied: 45, version: 14 });
    // A fresher source (status: the database read now) wins by its version.
    expect(consumerTotals(state, null, { version: 15, checkpointsCommitted: 14, eventsApplied: 47 })).toMatchObject({
      checkpointsCommitted: 14,
      eventsApplied: 47,
      version: 15,
    });
    // All of it survives continue-as-new.
    expect(new ConsumerState({ ...input, carried: state.carried() }).totals()).toEqual(state.totals());
  });

  it('Current Details refreshes last commit, version and totals with each progress reading, labelled with its time', () => {
    const state = new ConsumerState(input);
    state.adopt(outcome('lease_expired', 40, { lastCommitAt: '2026-01-01T00:00:00.000Z', sessions: 1 }), T0);
    state.noteReading({
      position: 70,
      head: 80,
      at: '2026-01-01T00:00:20.000Z',
      run: run(
        5,
        {
          sessions: 1,
          checkpointsCommitted: 15,
          eventsApplied: 30,
          acksSent: 15,
          lastCommitAt: '2026-01-01T00:00:19.000Z',
        },
        { version: 55, checkpointsCommitted: 54, eventsApplied: 1_230 },
      ),
    });
    const details = state.details(T0 + 21_000);
    expect(details).toContain('| last commit | 00:00:19 UTC, version 55; generation 1, next start from_floor |');
    expect(details).toContain(
      '| totals | 54 checkpoints, 1,230 events, 0 duplicates; 1 runs, 2 sessions, 15 ACKs (as of 00:00:20 UTC) |',
    );
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
      'node dist/cli/main.js resolve-gap --consumer c1 --decision from_floor --reason "<why>"',
    );
    expect(resumeCommand("desk 1's")).toBe(`node dist/cli/main.js resume --consumer 'desk 1'\\''s' --reason "<why>"`);
  });
});
