// docs/protocol.md §6: only a committed position that moved forward is progress. An unchanged checkpoint is not
// written again; a timed-out run is a crash (taken over at once), any other failure a fault that is counted.
import { ActivityFailure, ApplicationFailure, CancelledFailure, RetryState, TimeoutFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { namesSavedCheckpoint } from '../../protocol/checkpoint-change.js';
import type { CheckpointPlan, CommittedState } from '../../protocol/types.js';
import { ConsumerState } from '../../workflows/consumer-state.js';
import { classifyRunFailure, movedForward } from '../../workflows/run-failure.js';
import { NO_ACTIONS } from '../../protocol/types.js';
import { emptyCounters } from '../../activities/types.js';

const binding = {
  consumerId: 'c1',
  subscriptionId: 's1',
  stream: 'polymarket',
  historyId: 'h1',
  filter: { markets: ['m1'] },
  filterHash: 'sha256:f',
  generation: 1,
  mappings: {},
} as unknown as CheckpointPlan['binding'];

const saved: CommittedState = {
  consumerId: 'c1',
  leaseEpoch: 3,
  version: 7,
  position: 40,
  token: 'tok-40',
  generation: 1,
  binding,
  cutPosition: 40,
  cutReached: true,
  pendingStart: null,
  abandoned: false,
  updatedAt: null,
};

const plan: CheckpointPlan = {
  consumerId: 'c1',
  fence: { leaseEpoch: 3, version: 7 },
  startMode: 'resume',
  binding: { ...binding, filter: { markets: ['m1'] } },
  checkpoint: { position: 40, token: 'tok-40', generation: 1, cutPosition: 40, cutReached: true },
  events: [],
  qualityNotices: [],
  quarantinePolicy: { terminalReasons: [] },
  actions: NO_ACTIONS,
};

describe('namesSavedCheckpoint', () => {
  it('is true for the saved checkpoint delivered again with no events', () => {
    expect(namesSavedCheckpoint(plan, saved)).toBe(true);
  });

  it('is false when the checkpoint would change: a new token at the same position, a position, a cut, the binding, events', () => {
    const changed: CheckpointPlan[] = [
      { ...plan, checkpoint: { ...plan.checkpoint, token: 'tok-40b' } },
      { ...plan, checkpoint: { ...plan.checkpoint, position: 41 } },
      { ...plan, checkpoint: { ...plan.checkpoint, cutPosition: 45, cutReached: false } },
      { ...plan, binding: { ...plan.binding, generation: 2 } },
      { ...plan, events: [{} as CheckpointPlan['events'][number]] },
    ];
    for (const p of changed) expect(namesSavedCheckpoint(p, saved)).toBe(false);
    expect(namesSavedCheckpoint(plan, { ...saved, pendingStart: 'live_cut' })).toBe(false);
  });
});

const activityFailure = (cause: Error) =>
  new ActivityFailure('activity failed', 'consumeStream', '1', RetryState.MAXIMUM_ATTEMPTS_REACHED, 'w', cause);

describe('classifyRunFailure', () => {
  it('a heartbeat or start-to-close timeout is a crash', () => {
    expect(classifyRunFailure(activityFailure(new TimeoutFailure('t', undefined, 'HEARTBEAT')))).toEqual({
      kind: 'crash',
      description: 'heartbeat timeout',
      lastRun: null,
    });
    expect(classifyRunFailure(activityFailure(new TimeoutFailure('t', undefined, 'START_TO_CLOSE'))).kind).toBe(
      'crash',
    );
  });

  it("a crash carries the lost run's counters from its last heartbeat, so the totals keep its work", () => {
    const counters = {
      sessions: 2,
      checkpointsCommitted: 7,
      eventsApplied: 40,
      duplicates: 1,
      acksSent: 7,
      lastHeadPosition: 90,
      lastCommitAt: '2026-12-01T08:00:00.000Z',
    };
    const totals = { version: 9, checkpointsCommitted: 9, eventsApplied: 52 };
    const heartbeat = { position: 80, version: 9, generation: 1, headPosition: 90, counters, leaseEpoch: 4, totals };
    const failure = classifyRunFailure(activityFailure(new TimeoutFailure('t', heartbeat, 'HEARTBEAT')));
    expect(failure).toEqual({
      kind: 'crash',
      description: 'heartbeat timeout',
      lastRun: { leaseEpoch: 4, counters, totals },
    });
    // An older worker's heartbeat: its counters, without an epoch or totals.
    const older = { position: 80, version: 9, generation: 1, headPosition: 90, counters };
    expect(classifyRunFailure(activityFailure(new TimeoutFailure('t', older, 'HEARTBEAT')))).toMatchObject({
      lastRun: { leaseEpoch: null, counters, totals: null },
    });
    expect(classifyRunFailure(activityFailure(new TimeoutFailure('t', { position: 3 }, 'HEARTBEAT')))).toMatchObject({
      lastRun: null,
    });
  });

  it('every failure of a run carries what the run did; a storage failure says whether the database went away', () => {
    const committed = { position: 4, token: 't4', generation: 1, version: 3, filterHash: 'sha256:f' };
    const run = {
      leaseEpoch: 6,
      counters: { ...emptyCounters(), sessions: 43, acksSent: 43, checkpointsCommitted: 43 },
      totals: { version: 3, checkpointsCommitted: 3, eventsApplied: 10 },
    };
    const storage = ApplicationFailure.create({
      type: 'StorageFailure',
      message: 'commitCheckpoint failed (SQLSTATE 57P01): terminating connection due to administrator command',
      details: [{ code: 'storage_failure', sqlState: '57P01', connectionLost: true, committed, run }],
    });
    expect(classifyRunFailure(activityFailure(storage))).toMatchObject({
      kind: 'fault',
      type: 'StorageFailure',
      committed,
      run,
      connectionLost: true,
    });
    const fenced = ApplicationFailure.create({
      type: 'LeaseLost',
      message: 'lease lost',
      nonRetryable: true,
      details: [{ code: 'lease_lost', committed, run }],
    });
    expect(classifyRunFailure(activityFailure(fenced))).toMatchObject({ kind: 'fault', run, connectionLost: false });
    // A failure before the run began (or of an older worker) carries none.
    const bare = ApplicationFailure.create({ type: 'StorageFailure', message: 'acquireLease failed' });
    expect(classifyRunFailure(activityFailure(bare))).toMatchObject({ run: null, connectionLost: false });
  });

  it('a transport failure is a fault carrying the committed checkpoint and the server retry-after', () => {
    const committed = { position: 4, token: 't4', generation: 1, version: 3, filterHash: 'sha256:f' };
    const failure = ApplicationFailure.create({
      type: 'StreamTransportError',
      message: 'overloaded: server: overloaded: busy',
      details: [{ code: 'overloaded', committed, retryAfterMs: 750 }],
    });
    expect(classifyRunFailure(activityFailure(failure))).toEqual({
      kind: 'fault',
      type: 'StreamTransportError',
      message: 'overloaded: server: overloaded: busy',
      committed,
      retryAfterMs: 750,
      run: null,
      connectionLost: false,
    });
  });

  it('a database behind or a configuration error stops; a cancellation is nothing', () => {
    const behind = ApplicationFailure.create({ type: 'DatabaseBehind', message: 'behind', nonRetryable: true });
    expect(classifyRunFailure(activityFailure(behind))).toEqual({
      kind: 'stop',
      type: 'DatabaseBehind',
      message: 'behind',
    });
    expect(classifyRunFailure(activityFailure(new CancelledFailure('cancelled')))).toEqual({ kind: 'cancelled' });
  });
});

describe('fault count', () => {
  it('only a committed position beyond the base resets it', () => {
    expect(movedForward(null, null)).toBe(false);
    expect(movedForward(null, 0)).toBe(true);
    expect(movedForward(4, 4)).toBe(false);
    expect(movedForward(4, 5)).toBe(true);

    const state = new ConsumerState({ consumerId: 'c1', subscriptionId: 's1', filter: {}, initialStart: 'from_floor' });
    state.committed = { position: 4, token: 't4', generation: 1, version: 3, filterHash: 'sha256:f' };
    state.noteProgress();
    expect(state.countFault()).toBe(1);
    // Re-committing the same position (a new version, even a new token) is not progress.
    state.committed = { ...state.committed, token: 't4b', version: 9 };
    state.noteProgress();
    expect(state.countFault()).toBe(2);
    state.committed = { ...state.committed, position: 5, version: 10 };
    state.noteProgress();
    expect(state.faultsWithoutProgress).toBe(0);
    const carried = new ConsumerState({
      consumerId: 'c1',
      subscriptionId: 's1',
      filter: {},
      initialStart: 'from_floor',
      carried: { ...state.carried(), faultsWithoutProgress: 2 },
    });
    expect({ faults: carried.faultsWithoutProgress, base: carried.progressBase }).toEqual({ faults: 2, base: 5 });
  });
});
