// How `status` reads: progress from the freshest source, the database's effects, and the way out of a stop.
import { describe, expect, it } from 'vitest';
import { consumerProgress, totalCounters, type ConsumerReport } from '../../cli/consumers.js';
import { formatStatus, groupDecimal } from '../../cli/format.js';

const counters = {
  sessions: 2,
  checkpointsCommitted: 9,
  eventsApplied: 40,
  duplicates: 1,
  acksSent: 9,
  lastHeadPosition: 90,
  lastCommitAt: null,
};

function report(overrides: Partial<ConsumerReport> = {}): ConsumerReport {
  return {
    consumerId: 'c1',
    workflow: {
      workflowId: 'whalehunt-consumer:c1',
      runId: 'run-1',
      status: 'RUNNING',
      startTime: '2026-01-01T00:00:00.000Z',
    },
    status: {
      consumerId: 'c1',
      subscriptionId: 'c1',
      filter: { kinds: ['trade'] },
      committed: { position: 80, token: 't', generation: 1, version: 12, filterHash: 'sha256:x' },
      phase: 'awaiting_gap_decision',
      pendingRebind: null,
      stop: {
        phase: 'awaiting_gap_decision',
        reason: 'reset_required (cursor_expired)',
        resolveWith: 'node dist/cli/main.js resolve-gap --consumer c1 …',
        since: '2026-01-01T00:01:00.000Z',
      },
      lastError: null,
      counters,
      runs: 3,
      progress: { position: 80, head: 90, at: '2026-01-01T00:00:50.000Z' },
      progressSamples: [
        { at: Date.parse('2026-01-01T00:00:20.000Z'), position: 50 },
        { at: Date.parse('2026-01-01T00:00:50.000Z'), position: 80 },
      ],
    },
    statusError: null,
    heartbeat: null,
    workerHint: null,
    database: {
      state: {
        consumerId: 'c1',
        leaseEpoch: 4,
        version: 12,
        position: 80,
        token: 't',
        generation: 1,
        binding: null,
        cutPosition: 80,
        cutReached: true,
        pendingStart: null,
        abandoned: false,
        updatedAt: null,
      },
      executions: 1234,
      markets: 3,
      totalVolume: '1234567.5',
      heldQuarantine: 0,
      pendingOutbox: 2,
      alerts: { pending: 2, dead: 1, oldestPendingSeconds: 125.4 },
      lastDecision: {
        kind: 'gap',
        decision: 'live_cut',
        actor: 'ops',
        reason: 'accepted',
        replacedToken: 't0',
        decidedAt: '2026-01-01T00:00:30.000Z',
      },
    },
    databaseError: null,
    retention: {
      tables: [
        { table: 'event_receipts', rows: 5000, tableBytes: 3 * 1024 * 1024, indexBytes: 1024 * 1024 },
        { table: 'executions', rows: 1234, tableBytes: 512 * 1024, indexBytes: 64 * 1024 },
        { table: 'checkpoints', rows: 1, tableBytes: 8192, indexBytes: 16384 },
      ],
      lastRun: {
        id: 7,
        startedAt: '2026-01-01T00:00:00.000Z',
        finishedAt: '2026-01-01T00:00:02.000Z',
        status: 'succeeded',
        receiptsDeleted: 4200,
        outboxDeleted: 3,
        revisionsDeleted: 0,
        error: null,
      },
    },
    ...overrides,
  };
}

describe('status rendering', () => {
  it('groups decimal amounts by thousands without touching the fraction', () => {
    expect(groupDecimal('1234567.5')).toBe('1,234,567.5');
    expect(groupDecimal('999')).toBe('999');
    expect(groupDecimal('0.123456')).toBe('0.123456');
  });

  const now = Date.parse('2026-01-01T00:02:00.000Z');

  it("takes the freshest reading: the running lease's heartbeat, else the workflow's; the head never behind", () => {
    const waiting = consumerProgress(report(), now);
    // Waiting for a decision, nothing is consumed: the rate is 0 whatever moved before.
    expect(waiting).toEqual({ reading: report().status!.progress, source: 'workflow', rate: 0 });
    const streaming = report({
      status: { ...report().status!, phase: 'streaming', stop: null },
      heartbeat: {
        position: 95,
        version: 13,
        generation: 1,
        headPosition: 95,
        at: '2026-01-01T00:01:50.000Z',
        counters,
      },
    });
    const live = consumerProgress(streaming, now);
    expect(live.reading).toEqual({ position: 95, head: 95, at: '2026-01-01T00:01:50.000Z' });
    expect(live.source).toBe('heartbeat');
    // From the last sample at or before the window's start (80 at 00:00:50) to the heartbeat's 95, over 70 s.
    expect(live.rate).toBeCloseTo(15 / 70);
  });

  it('shows phase, progress, effects, the last decision and the command that resolves a stop', () => {
    const text = formatStatus(report(), now);
    expect(text).toMatch(/^consumer c1\n/);
    expect(text).toMatch(/phase\s+awaiting_gap_decision/);
    expect(text).toMatch(
      /progress\s+position 80 {2}head 90 {2}lag 10 {2}0\.0 pos\/s {2}as of 00:00:50 UTC \(the workflow's last reading/,
    );
    expect(text).toMatch(/committed\s+position 80 \(the database, read now\)/);
    expect(text).toMatch(/executions\s+1,234 {3}markets 3 {3}volume 1,234,567.5 USD/);
    expect(text).toMatch(/counters\s+sessions 2 {3}checkpoints 9 {3}applied 40/);
    expect(text).toMatch(/last decision\s+gap live_cut by ops at 2026-01-01T00:00:30.000Z: accepted/);
    expect(text).toMatch(
      /alerts\s+2 pending \(oldest 2m 05s\), 1 dead \(see: whalehunt-consumer alerts list --consumer c1 --state dead\)/,
    );
    expect(text).toMatch(/resolve with\s+node dist\/cli\/main.js resolve-gap --consumer c1/);
  });

  it("totals: ended runs, the running run's further report once, and the database's checkpoints and events", () => {
    const base = report().status!;
    const running = { ...counters, sessions: 1, checkpointsCommitted: 3, eventsApplied: 6, acksSent: 3 };
    const heartbeat = { position: 95, version: 15, generation: 1, headPosition: 95, at: '2026-01-01T00:01:50.000Z' };
    const saved = (totals: { checkpointsCommitted: number; eventsApplied: number }, version: number) => ({
      ...report().database!,
      state: { ...report().database!.state, version, totals },
    });
    const streaming = report({
      status: { ...base, phase: 'streaming', stop: null, endedEpoch: 4, live: null },
      heartbeat: { ...heartbeat, counters: running, leaseEpoch: 5 },
      database: saved({ checkpointsCommitted: 15, eventsApplied: 70 }, 16),
    });
    // Sessions and ACKs: the ended runs' plus the running one's. Checkpoints and events: the database read now.
    expect(totalCounters(streaming)).toMatchObject({
      sessions: 3,
      acksSent: 12,
      checkpointsCommitted: 15,
      eventsApplied: 70,
      version: 16,
    });
    // A heartbeat of a run that ended between the description and the query is counted once, by the workflow.
    const ended = report({
      status: { ...base, endedEpoch: 5, live: null },
      heartbeat: { ...heartbeat, counters: running, leaseEpoch: 5 },
      database: null,
    });
    expect(totalCounters(ended)).toMatchObject({ sessions: 2, acksSent: 9, checkpointsCommitted: 9, version: null });
    // The workflow's live report is used when it is further on than the heartbeat Temporal last stored.
    const further = { leaseEpoch: 5, counters: { ...running, sessions: 2, acksSent: 8 }, totals: null, at: 'x' };
    const signalled = report({
      status: { ...base, endedEpoch: 4, live: further },
      heartbeat: { ...heartbeat, counters: running, leaseEpoch: 5 },
      database: null,
    });
    expect(totalCounters(signalled)).toMatchObject({ sessions: 4, acksSent: 17 });
    expect(formatStatus(streaming, now)).toMatch(/counters\s+sessions 3 {3}checkpoints 15 {3}applied 70/);
  });

  it('shows the last maintenance run and the consumer tables, largest first, from the database', () => {
    const text = formatStatus(report(), now);
    expect(text).toMatch(
      /maintenance\s+succeeded 2026-01-01T00:00:02.000Z: removed 4,200 receipts, 3 outbox rows, 0 revisions\n/,
    );
    expect(text).toMatch(/tables\s+event_receipts 4.0 MB, executions 576.0 kB, checkpoints 24.0 kB \(with indexes\)/);
    const never = formatStatus(report({ retention: { tables: [], lastRun: null } }), now);
    expect(never).toMatch(/maintenance\s+none yet \(whalehunt-consumer maintenance runs one now\)/);
  });

  it('says what it could not see: an unanswered query, no database', () => {
    const text = formatStatus(
      report({ status: null, statusError: 'status query: no answer within 5 s', database: null }),
      now,
    );
    expect(text).toMatch(/phase\s+unknown: status query: no answer within 5 s/);
    expect(text).toMatch(/database\s+not consulted \(set DATABASE_URL/);
  });
});
