// The streaming core end to end: a real ReferenceStreamServer, real Postgres, the real commit path.
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { filterHash } from '../../protocol/canonical.js';
import { encodeServerFrame, PROTOCOL_NAME } from '../../protocol/codec.js';
import { consumeStream, runReportOf } from '../../activities/consume-stream.js';
import { DatabaseBehind, LeaseLost, StreamTransportError } from '../../activities/stream-errors.js';
import {
  emptyCounters,
  type ConsumeOutcome,
  type StreamCounters,
  type StreamHeartbeat,
} from '../../activities/types.js';
import {
  acquireLease,
  commitCheckpoints,
  DEFAULT_RETENTION_POLICY,
  loadCommitted,
  RecentExecutionsBudget,
  runMaintenance,
} from '../../db/index.js';
import { SharedBudget } from '../../protocol/shared-budget.js';
import type { CheckpointPlan } from '../../protocol/types.js';
import type { ReferenceStreamServer } from '../../simulator/server.js';
import { useTestDatabase } from '../support/db.js';
import { waitFor } from '../support/wait.js';
import {
  API_KEY,
  allEvents,
  foldExecutions,
  journal,
  makeRun,
  resumeToHead,
  savedEffects,
  startServer,
  SUBSCRIPTION,
} from './consume-stream-support.js';

const db = useTestDatabase();
let servers: ReferenceStreamServer[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});

async function server(...args: Parameters<typeof startServer>): Promise<ReferenceStreamServer> {
  const s = await startServer(...args);
  servers.push(s);
  return s;
}

const everything = {};
const acksOf = (s: ReferenceStreamServer, consumerId: string) =>
  s.acks.filter((a) => a.consumerId === consumerId).map((a) => a.position);

describe('consumeStream end to end', () => {
  it('streams a journal: every effect once, C = the last checkpoint, one ACK per commit', async () => {
    const s = await server({ journal: journal() });
    const run = makeRun(db.pool, s, 'c-e2e');

    const first = await run.consume({ mode: 'from_floor', filter: everything });
    expect(first).toMatchObject({ kind: 'rebound', generation: 1, committed: { generation: 1, version: 1 } });

    const outcome = await resumeToHead(run, s, 'c-e2e');
    expect(outcome.kind).toBe('cancelled');
    const { state, executions, receiptIds } = await savedEffects(db.pool, 'c-e2e');
    expect(state.checkpoint?.position).toBe(s.journal.head);
    expect(outcome.committed).toMatchObject({
      position: s.journal.head,
      version: state.checkpoint!.version,
      token: state.checkpoint!.token,
    });
    expect(executions).toEqual(foldExecutions(s.journal));
    expect(receiptIds).toEqual(
      allEvents(s.journal)
        .map((e) => e.eventId)
        .sort(),
    );
    expect(acksOf(s, 'c-e2e')).toEqual(run.committed);
    expect(s.rejectedAcks).toEqual([]);
    // heartbeats carry progress only
    const last = run.heartbeats.at(-1)!;
    expect(last).toMatchObject({ position: s.journal.head, generation: 1 });
    expect(JSON.stringify(run.heartbeats)).not.toContain(API_KEY);
    // The run's report: the database's own totals at its last commit, as the row counts them.
    const row = await loadCommitted(db.pool, 'c-e2e');
    const totals = { version: row!.version, ...row!.totals! };
    expect(totals).toEqual({
      version: state.checkpoint!.version,
      checkpointsCommitted: state.checkpoint!.version,
      eventsApplied: state.receipts.filter((r) => r.outcome === 'applied').length,
    });
    expect(outcome.totals).toEqual(totals);
    expect(last.totals).toEqual(totals);
    expect(outcome.leaseEpoch).toBe(row!.leaseEpoch);
  });

  it("holds a share of its process's recent-executions budget while it streams, and gives it back", async () => {
    const s = await server({ journal: journal() });
    const budget = new RecentExecutionsBudget(4, 1, 4);
    const otherRun = budget.open();
    const sharesAtCommits: number[] = [];
    const run = makeRun(db.pool, s, 'c-budget', {
      recentExecutions: budget,
      store: {
        acquireLease: (id, options) => acquireLease(db.pool, id, options),
        // the store keeps the run's cache current, as the worker's does
        commitCheckpoints: (plans, recent) => commitCheckpoints(db.pool, plans, recent),
      },
      hooks: { afterCommit: () => void sharesAtCommits.push(budget.share()) },
    });

    expect((await run.consume({ mode: 'from_floor', filter: everything })).kind).toBe('rebound');
    expect((await resumeToHead(run, s, 'c-budget')).kind).toBe('cancelled');
    // two runs open (this one and the other): half the budget each while this one streamed; all of it after
    expect(sharesAtCommits.length).toBeGreaterThan(1);
    expect(new Set(sharesAtCommits)).toEqual(new Set([2]));
    expect(budget.share()).toBe(4);
    otherRun.close();
    const { executions } = await savedEffects(db.pool, 'c-budget');
    expect(executions).toEqual(foldExecutions(s.journal));
    expect(acksOf(s, 'c-budget')).toEqual(run.committed);
  });

  it('each hello saves the retention floor; maintenance then removes the receipts below it and nothing else', async () => {
    const j = journal();
    const s = await server({ journal: j });
    const run = makeRun(db.pool, s, 'c-floor');
    await run.consume({ mode: 'from_floor', filter: everything });
    const floors = async () =>
      (
        await db.pool.query<{ history_id: string; floor: string }>(
          'SELECT history_id, floor FROM retention_floors WHERE consumer_id = $1',
          ['c-floor'],
        )
      ).rows.map((row) => ({ historyId: row.history_id, floor: Number(row.floor) }));
    await waitFor(async () => (await floors()).length === 1, { description: 'the first floor saved' });
    expect(await floors()).toEqual([{ historyId: j.history.id, floor: j.floor }]);

    // The consumer catches up; the source then drops its oldest transitions and goes on; the next session's hello
    // announces the new floor.
    await resumeToHead(run, s, 'c-floor');
    const floor = Math.floor(j.head / 2);
    j.setRetentionFloor(floor);
    for (let i = 0; i < 5; i += 1) j.appendGenerated();
    await resumeToHead(run, s, 'c-floor');
    await waitFor(async () => (await floors())[0]?.floor === floor, { description: 'the moved floor saved' });
    const before = await savedEffects(db.pool, 'c-floor');

    await runMaintenance(db.pool, DEFAULT_RETENTION_POLICY);
    const after = await savedEffects(db.pool, 'c-floor');
    const kept = allEvents(s.journal)
      .filter((e) => e.position >= floor)
      .map((e) => e.eventId)
      .sort();
    expect(after.receiptIds).toEqual(kept);
    expect(after.receiptIds.length).toBeLessThan(before.receiptIds.length);
    expect(after.executions).toEqual(before.executions);
    expect(after.state.volumes).toEqual(before.state.volumes);
  });

  it('resumes from the committed token after the socket drops mid-stream; effects once', async () => {
    const j = journal();
    const s = await server({ journal: j });
    const run = makeRun(db.pool, s, 'c-drop');
    await run.consume({ mode: 'from_floor', filter: everything });
    // Armed now: the first connection may have been sent the whole replay before it was closed.
    s.faults.dropAtPosition = Math.floor(j.head / 2);

    await resumeToHead(run, s, 'c-drop');
    expect(s.connections.length).toBeGreaterThanOrEqual(3);
    // every resume started exactly at what was committed before it
    const resumes = s.subscriptions.filter((x) => x.consumerId === 'c-drop' && x.mode === 'resume');
    for (const r of resumes) expect([0, ...run.committed]).toContain(r.startPosition);
    const { executions, receiptIds } = await savedEffects(db.pool, 'c-drop');
    expect(executions).toEqual(foldExecutions(s.journal));
    expect(receiptIds).toHaveLength(allEvents(s.journal).length);
    expect(run.logs.some((l) => l.msg.includes('reconnecting'))).toBe(true);
  });

  it('an explicit start reports rebound after its first commit even when the socket then drops', async () => {
    const j = journal();
    const s = await server({ journal: j, faults: { dropAtPosition: Math.floor(j.head / 2) } });
    const run = makeRun(db.pool, s, 'c-rebound-drop');
    const outcome = await run.consume({ mode: 'from_floor', filter: everything });
    expect(outcome).toMatchObject({ kind: 'rebound', generation: 1, committed: { position: run.committed.at(-1) } });
    expect(run.committed.length).toBeGreaterThanOrEqual(1);
  });

  it('drops a session whose frameSequence repeats: nothing of it is committed or ACKed, then resumes', async () => {
    const s = await server({ journal: journal() });
    const run = makeRun(db.pool, s, 'c-seq');
    await run.consume({ mode: 'from_floor', filter: everything });
    s.faults.frameSequence = { mode: 'duplicate', atFrame: 6 };
    await resumeToHead(run, s, 'c-seq');

    const violation = run.logs.find((l) => l.level === 'error' && l.msg.startsWith('dropping the stream session'));
    expect(String(violation?.fields?.error)).toMatch(/frameSequence/);
    expect(acksOf(s, 'c-seq')).toEqual(run.committed);
    expect(s.rejectedAcks).toEqual([]);
    expect((await savedEffects(db.pool, 'c-seq')).executions).toEqual(foldExecutions(s.journal));
  });

  it('an old attempt whose connection keeps delivering after a newer attempt took over neither commits nor ACKs', async () => {
    // One checkpoint in flight at a time: the older attempt's first resumed commit cannot reach the head, so there is
    // still something to deliver to it after the takeover, whatever the commit timing.
    const s = await server({ journal: journal(60), maxUnackedCheckpoints: 1, faults: { drainOldConnections: true } });
    const newer = makeRun(db.pool, s, 'c-old');
    const takeover: { outcome?: Promise<ConsumeOutcome> } = {};
    const older = makeRun(db.pool, s, 'c-old', {
      hooks: {
        // After the older attempt's first resumed commit, a newer attempt takes the lease and subscribes;
        // the server keeps delivering to the older connection.
        afterCommit: async () => {
          if (takeover.outcome || older.committed.length < 2) return;
          const olderConnection = s.subscriptions.at(-1)!.connectionId;
          takeover.outcome = resumeToHead(newer, s, 'c-old');
          await s.waitForSubscription((x) => x.consumerId === 'c-old' && x.connectionId !== olderConnection);
        },
      },
    });
    await older.consume({ mode: 'from_floor', filter: everything });
    const error = await older.consume({ mode: 'resume' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLost);
    expect((await takeover.outcome)?.kind).toBe('cancelled');
    const olderConnections = new Set(
      s.subscriptions
        .filter((x) => x.consumerId === 'c-old')
        .slice(0, 2)
        .map((x) => x.connectionId),
    );
    const olderAcks = s.acks.filter((a) => olderConnections.has(a.connectionId)).map((a) => a.position);
    expect(olderAcks).toEqual(older.committed);
    expect((await savedEffects(db.pool, 'c-old')).executions).toEqual(foldExecutions(s.journal));
    expect((await savedEffects(db.pool, 'c-old')).state.checkpoint?.position).toBe(s.journal.head);
  });

  it('a rebind commits generation + 1 with the new filter from the saved token and reports rebound', async () => {
    const s = await server({ journal: journal() });
    const run = makeRun(db.pool, s, 'c-rebind');
    await run.consume({ mode: 'from_floor', filter: { kinds: ['trade'] } });
    const before = (await savedEffects(db.pool, 'c-rebind')).state.checkpoint!;

    const outcome = await run.consume({ mode: 'rebind', filter: everything });
    expect(outcome).toMatchObject({
      kind: 'rebound',
      generation: 2,
      committed: { generation: 2, filterHash: filterHash(everything) },
    });
    const rebind = s.subscriptions.find((x) => x.consumerId === 'c-rebind' && x.mode === 'rebind');
    expect(rebind).toMatchObject({ generation: 2, startPosition: before.position });
    // a retried attempt of the same rebind resumes the committed binding instead of bumping again
    const retried = await run.consume({ mode: 'rebind', filter: everything });
    expect(retried).toMatchObject({ kind: 'rebound', generation: 2 });
    expect(s.subscriptions.filter((x) => x.consumerId === 'c-rebind').map((x) => x.mode)).toEqual([
      'from_floor',
      'rebind',
      'resume',
    ]);
  });

  it('commits and ACKs a zero-match checkpoint', async () => {
    const s = await server({ journal: journal(12) });
    const run = makeRun(db.pool, s, 'c-zero');
    const outcome = await run.consume({ mode: 'from_floor', filter: { wallets: ['nobody-trades-here'] } });
    expect(outcome.kind).toBe('rebound');
    const { state, receiptIds } = await savedEffects(db.pool, 'c-zero');
    expect(state.checkpoint?.position).toBe(run.committed[0]);
    expect(receiptIds).toEqual([]);
    expect(acksOf(s, 'c-zero')).toEqual(run.committed);
  });

  it('a conflicting event refuses the checkpoint: no commit, no ACK, failed conflicting_event', async () => {
    const j = journal();
    const s = await server({ journal: j });
    const run = makeRun(db.pool, s, 'c-conflict');
    await run.consume({ mode: 'from_floor', filter: everything });
    s.faults.conflictingEventAt = Math.floor(j.head / 2);
    const before = await savedEffects(db.pool, 'c-conflict');

    const outcome = await run.consume({ mode: 'resume' });
    expect(outcome).toMatchObject({ kind: 'failed', code: 'conflicting_event' });
    const after = await savedEffects(db.pool, 'c-conflict');
    expect(after.state.checkpoint?.position).toBe(outcome.committed.position);
    expect(after.state.checkpoint!.position!).toBeLessThan(j.head);
    expect(after.state.checkpoint!.position!).toBeGreaterThanOrEqual(before.state.checkpoint!.position!);
    expect(acksOf(s, 'c-conflict')).toEqual(run.committed);
  });

  it('rejects an oversize frame with a clear error, loses nothing committed and resumes', async () => {
    const j = journal();
    const s = await server({ journal: j, maxFrameBytes: 64 * 1024 });
    const run = makeRun(db.pool, s, 'c-big');
    await run.consume({ mode: 'from_floor', filter: everything });
    s.faults.oversizeFrameAt = Math.floor(j.head / 2);
    await resumeToHead(run, s, 'c-big');

    const rejected = run.logs.find((l) => l.msg === 'rejected a server frame');
    expect(rejected?.fields).toMatchObject({ code: 'frame_too_large' });
    expect((await savedEffects(db.pool, 'c-big')).executions).toEqual(foldExecutions(s.journal));
    expect(acksOf(s, 'c-big')).toEqual(run.committed);
  });

  it('returns reset_required with the saved token kept when the cursor expired', async () => {
    const j = journal();
    const s = await server({ journal: j });
    const run = makeRun(db.pool, s, 'c-reset');
    await run.consume({ mode: 'from_floor', filter: everything });
    const saved = (await savedEffects(db.pool, 'c-reset')).state.checkpoint!;
    j.setRetentionFloor(j.head);

    const outcome = await run.consume({ mode: 'resume' });
    expect(outcome).toMatchObject({
      kind: 'reset_required',
      reason: 'cursor_expired',
      refusedToken: saved.token,
      committed: { token: saved.token, position: saved.position },
    });
    const after = (await savedEffects(db.pool, 'c-reset')).state.checkpoint!;
    expect({ token: after.token, position: after.position }).toEqual({ token: saved.token, position: saved.position });
  });

  it('returns held_quarantine for an unsupported kind and does not advance', async () => {
    const j = journal();
    const s = await server({ journal: j, faults: { unknownKindAt: 1 } });
    const run = makeRun(db.pool, s, 'c-held');
    const outcome = await run.consume({ mode: 'from_floor', filter: everything });
    expect(outcome).toMatchObject({ kind: 'held_quarantine', committed: { position: null } });
    if (outcome.kind !== 'held_quarantine') return;
    expect(outcome.items[0]).toMatchObject({ kind: 'market_resolution', reason: 'unsupported_kind' });
    expect(acksOf(s, 'c-held')).toEqual([]);
  });

  it('an unknown kind past the first checkpoint of an explicit start is held on the resumed session', async () => {
    // The explicit start's connection ends at its first commit (position 5) although the server sent the whole
    // replay, unknown kind at 12 included; the next session replays 12 and must stop there too.
    const s = await server({ journal: journal(), faults: { unknownKindAt: 12 } });
    const run = makeRun(db.pool, s, 'c-held-later');
    expect(await run.consume({ mode: 'from_floor', filter: everything })).toMatchObject({
      kind: 'rebound',
      committed: { position: 5 },
    });
    const outcome = await run.consume({ mode: 'resume' }, { leaseMs: 20_000 });
    expect(outcome).toMatchObject({ kind: 'held_quarantine' });
    if (outcome.kind !== 'held_quarantine') return;
    expect(outcome.items).toEqual([expect.objectContaining({ kind: 'market_resolution', reason: 'unsupported_kind' })]);
    expect(outcome.committed.position).toBeLessThan(12);
  });
});

describe('consumeStream stops and failures', () => {
  it('a wrong API key fails unauthorized and the key appears in no log line or outcome', async () => {
    const s = await server({ journal: journal(5) });
    const run = makeRun(db.pool, s, 'c-unauth');
    const secret = 'wrong-key-never-logged-91b2';
    run.deps.config.apiKey = secret;
    const outcome = await run.consume({ mode: 'from_floor', filter: everything });
    expect(outcome).toMatchObject({ kind: 'failed', code: 'unauthorized' });
    expect(JSON.stringify({ outcome, logs: run.logs, heartbeats: run.heartbeats })).not.toContain(secret);
  });

  it('overloaded is thrown as a StreamTransportError carrying retryAfterMs', async () => {
    const s = await server({ journal: journal(5), faults: { overloadSubscribes: { count: 1, retryAfterMs: 1234 } } });
    const run = makeRun(db.pool, s, 'c-overload');
    const error = await run.consume({ mode: 'from_floor', filter: everything }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StreamTransportError);
    expect(error).toMatchObject({ code: 'overloaded', retryAfterMs: 1234 });
    // What the failed run did goes with its failure: one session, nothing committed.
    expect(runReportOf(error)).toMatchObject({
      counters: { sessions: 1, checkpointsCommitted: 0 },
      totals: { version: 0 },
    });
  });

  it('an attempt waiting for its lease heartbeats what it inherited, and streams once the lease is free', async () => {
    const s = await server({ journal: journal() });
    const run = makeRun(db.pool, s, 'c-waiting');
    // Another session holds the consumer's lease lock, as a predecessor still inside a commit does.
    const holder = await db.pool.connect();
    await holder.query('BEGIN');
    await holder.query("SELECT pg_advisory_xact_lock(hashtextextended('whalehunt-consumer:' || $1, 0))", ['c-waiting']);
    const inherited: StreamCounters = { ...emptyCounters(), sessions: 3, eventsApplied: 41, lastHeadPosition: 9 };
    const heartbeats: StreamHeartbeat[] = [];
    const outcome = consumeStream(
      run.deps,
      {
        consumerId: 'c-waiting',
        subscriptionId: SUBSCRIPTION,
        start: { mode: 'from_floor', filter: everything },
        leaseMs: 120_000,
        expected: null,
      },
      { heartbeat: (d) => heartbeats.push(d), signal: run.abort.signal, takeover: { attempt: 2, counters: inherited } },
    );
    try {
      // The one at once and one of the interval (heartbeatEveryMs 1,000): the wait is not silent past a timeout.
      await waitFor(() => Promise.resolve(heartbeats.length >= 2), {
        description: 'two heartbeats while the lease is held',
        timeoutMs: 10_000,
      });
      expect(run.committed).toEqual([]);
      expect(heartbeats.map((h) => h.counters)).toEqual([inherited, inherited]);
      expect(heartbeats[0]).toMatchObject({ position: null, version: 0, generation: null, headPosition: 9 });
    } finally {
      await holder.query('COMMIT');
      holder.release();
    }
    await expect(outcome).resolves.toMatchObject({ kind: 'rebound' });
    expect(run.committed.length).toBeGreaterThan(0);
  });

  it('a lost lease (another attempt took it) throws LeaseLost and never ACKs that checkpoint', async () => {
    const s = await server({ journal: journal() });
    const zombie = makeRun(db.pool, s, 'c-zombie', {
      hooks: {
        // A newer attempt acquires the lease while this one stages its first batch.
        afterStage: async () => {
          await acquireLease(db.pool, 'c-zombie');
        },
      },
    });
    const error = await zombie.consume({ mode: 'from_floor', filter: everything }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLost);
    expect(zombie.committed).toEqual([]);
    expect(acksOf(s, 'c-zombie')).toEqual([]);
  });

  /**
   * A run whose store holds the first commit of its resume session until a batch beyond `stagedBeyond` positions
   * after it has been staged: only a session that stages while it commits gets there.
   */
  function heldRun(s: ReferenceStreamServer, consumerId: string, stagedBeyond: number, whileHeld = async () => {}) {
    const calls: number[][] = [];
    let armed = false;
    let held: number | null = null;
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const run = makeRun(db.pool, s, consumerId, {
      store: {
        acquireLease: (id, options) => acquireLease(db.pool, id, options),
        async commitCheckpoints(plans: readonly CheckpointPlan[]) {
          if (armed) calls.push(plans.map((p) => p.checkpoint.position));
          if (armed && held === null) {
            held = plans[0]!.checkpoint.position;
            await released;
            await whileHeld();
          }
          return commitCheckpoints(db.pool, plans);
        },
      },
      hooks: {
        afterStage: (position) => {
          if (held !== null && position > held + stagedBeyond) release();
        },
      },
    });
    return { run, calls, arm: () => (armed = true) };
  }

  it('stages the next checkpoints while one commits, commits them together, and ACKs each in order after its commit', async () => {
    const s = await server({ journal: journal(60), checkpointEvery: 2 });
    const { run, calls, arm } = heldRun(s, 'c-pipe', 5);
    const ackedAhead: number[] = [];
    run.deps.hooks = {
      ...run.deps.hooks,
      afterAck: async (position) => {
        if (((await loadCommitted(db.pool, 'c-pipe'))?.position ?? 0) < position) ackedAhead.push(position);
      },
    };
    await run.consume({ mode: 'from_floor', filter: everything });
    arm();
    expect((await resumeToHead(run, s, 'c-pipe')).kind).toBe('cancelled');

    // The checkpoints completed while the first one was held were committed by one call.
    expect(calls[0]).toHaveLength(1);
    expect(calls[1]!.length).toBeGreaterThanOrEqual(2);
    const acks = acksOf(s, 'c-pipe');
    expect(acks).toEqual(run.committed);
    expect(acks).toEqual([...acks].sort((a, b) => a - b));
    expect(new Set(acks).size).toBe(acks.length);
    expect(ackedAhead).toEqual([]);
    const { executions } = await savedEffects(db.pool, 'c-pipe');
    expect(executions).toEqual(foldExecutions(s.journal));
    expect(s.rejectedAcks).toEqual([]);
  });

  it('without test hooks, a group commit ACKs each of its checkpoints once, in order, only after it committed', async () => {
    const s = await server({ journal: journal(60), checkpointEvery: 2 });
    const { run, calls, arm } = heldRun(s, 'c-burst', 5);
    await run.consume({ mode: 'from_floor', filter: everything });
    // Only the staging hook stays: the ACKs of a run are then held and written together (no hook to flush for).
    run.deps.hooks = { afterStage: run.deps.hooks!.afterStage! };
    const commitsReturned = new Set<number>();
    const { commitCheckpoints: commit } = run.deps.store;
    run.deps.store = {
      ...run.deps.store,
      async commitCheckpoints(plans, recent) {
        const outcomes = await commit(plans, recent);
        for (const plan of plans) commitsReturned.add(plan.checkpoint.position);
        return outcomes;
      },
    };
    const ackedBeforeCommit: number[] = [];
    const onAck = (ack: { consumerId: string; position: number }) => {
      if (ack.consumerId === 'c-burst' && !commitsReturned.has(ack.position)) ackedBeforeCommit.push(ack.position);
    };
    s.events.on('ack', onAck);
    arm();
    try {
      expect((await resumeToHead(run, s, 'c-burst')).kind).toBe('cancelled');
    } finally {
      s.events.off('ack', onAck);
    }

    expect(calls[1]!.length).toBeGreaterThanOrEqual(2);
    const resumed = acksOf(s, 'c-burst').slice(1);
    expect(resumed).toEqual(calls.flat());
    expect(resumed.at(-1)).toBe(s.journal.head);
    expect(ackedBeforeCommit).toEqual([]);
    expect(s.rejectedAcks).toEqual([]);
    expect(run.heartbeats.at(-1)).toMatchObject({ position: s.journal.head });
  });

  /**
   * Streams a 200-transition journal whose commits lag: after the first session, a commit starts only once more
   * than `bound` events wait behind it (or everything was staged). Returns the most events seen staged and not yet
   * committed, and the most one checkpoint (5 transitions) can hold.
   */
  async function lagRun(consumerId: string, bound: number, options: { maxEvents?: number; staging?: SharedBudget }) {
    const s = await server({ journal: journal(200) });
    // Events of the journal up to each position, and the most one checkpoint can hold.
    const upTo = new Map<number, number>([[0, 0]]);
    let total = 0;
    let perTransition = 0;
    for (let i = 0; s.journal.at(i); i += 1) {
      const transition = s.journal.at(i)!;
      total += transition.events.length;
      perTransition = Math.max(perTransition, transition.events.length);
      upTo.set(transition.position, total);
    }
    let staged = 0;
    let committed = 0;
    let mostUncommitted = 0;
    let armed = false;
    let lagged: () => void = () => undefined;
    const lagging = () =>
      new Promise<void>((resolve) => {
        lagged = resolve;
        if (staged - committed > bound || staged === total) resolve();
      });
    const run = makeRun(db.pool, s, consumerId, {
      ...(options.staging ? { staging: options.staging } : {}),
      store: {
        acquireLease: (id, options) => acquireLease(db.pool, id, options),
        async commitCheckpoints(plans: readonly CheckpointPlan[]) {
          if (armed) await lagging();
          return commitCheckpoints(db.pool, plans);
        },
      },
      hooks: {
        afterStage: (position) => {
          staged = upTo.get(position)!;
          mostUncommitted = Math.max(mostUncommitted, staged - committed);
          if (staged - committed > bound || staged === total) lagged();
        },
        afterCommit: (position) => {
          committed = upTo.get(position)!;
        },
      },
    });
    if (options.maxEvents !== undefined)
      run.deps.config.staging = { maxEvents: options.maxEvents, maxBytes: 1_000_000, maxAgeMs: 60_000 };
    await run.consume({ mode: 'from_floor', filter: everything });
    armed = true;
    expect((await resumeToHead(run, s, consumerId)).kind).toBe('cancelled');
    expect(acksOf(s, consumerId)).toEqual(run.committed);
    const { executions } = await savedEffects(db.pool, consumerId);
    expect(executions).toEqual(foldExecutions(s.journal));
    return { mostUncommitted, largestCheckpoint: 5 * perTransition, total };
  }

  it('holds at most twice the staging bound uncommitted while the commits lag behind the frames', async () => {
    const maxEvents = 30;
    const { mostUncommitted, largestCheckpoint } = await lagRun('c-lag', maxEvents, { maxEvents });
    // Staging (one checkpoint), the waiting checkpoints (the bound and the one that crossed it) and the run in
    // flight (what waited when it started); more than the bound shows the commits did lag.
    expect(mostUncommitted).toBeGreaterThan(maxEvents);
    expect(mostUncommitted).toBeLessThanOrEqual(2 * maxEvents + 3 * largestCheckpoint);
  });

  it("holds at most twice its share of its process's staging budget uncommitted, and gives the share back", async () => {
    // STAGING_MAX_EVENTS stays 10,000: what bounds this run is its share, 20 while another run holds a seat.
    const budget = new SharedBudget({ total: 40, most: 40, least: 10 });
    const otherRun = budget.open();
    const { mostUncommitted, largestCheckpoint, total } = await lagRun('c-lag-share', 20, { staging: budget });
    expect(total).toBeGreaterThan(2 * 20 + 3 * largestCheckpoint);
    expect(mostUncommitted).toBeGreaterThan(20);
    expect(mostUncommitted).toBeLessThanOrEqual(2 * 20 + 3 * largestCheckpoint);
    // the run's seat went back when it ended: the other run alone holds the whole budget
    expect(budget.share()).toBe(40);
    otherRun.close();
  });

  it('a fenced commit discards the checkpoints staged behind it: none is committed or ACKed', async () => {
    const s = await server({ journal: journal(60), checkpointEvery: 2 });
    // While the first commit is held, a newer attempt takes the lease: that commit is fenced.
    const { run, calls, arm } = heldRun(s, 'c-pipe-fenced', 5, async () => {
      await acquireLease(db.pool, 'c-pipe-fenced');
    });
    await run.consume({ mode: 'from_floor', filter: everything });
    const before = await savedEffects(db.pool, 'c-pipe-fenced');
    const acked = acksOf(s, 'c-pipe-fenced');
    arm();
    const error = await run.consume({ mode: 'resume' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLost);
    expect(calls).toHaveLength(1);
    expect(acksOf(s, 'c-pipe-fenced')).toEqual(acked);
    const after = await savedEffects(db.pool, 'c-pipe-fenced');
    expect(after.state.checkpoint?.position).toBe(before.state.checkpoint?.position);
    expect(after.executions).toEqual(before.executions);
  });

  it('refuses to run on a database behind the workflow copy', async () => {
    const s = await server({ journal: journal(5) });
    const run = makeRun(db.pool, s, 'c-behind');
    const error = await run
      .consume(
        { mode: 'resume' },
        { expected: { position: 9, token: 't', generation: 1, version: 40, filterHash: null } },
      )
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseBehind);
    expect(s.connections).toEqual([]);
  });

  it('a first start that is resume is a config failure: the first start must be explicit', async () => {
    const s = await server({ journal: journal(5) });
    const outcome = await makeRun(db.pool, s, 'c-first').consume({ mode: 'resume' });
    expect(outcome).toMatchObject({ kind: 'failed', code: 'config' });
    expect(s.connections).toEqual([]);
  });

  it('gives up after maxAttempts failed connections with a StreamTransportError', async () => {
    const s = await server({ journal: journal(5) });
    const run = makeRun(db.pool, s, 'c-down');
    run.deps.config.url = s.url.replace(/:\d+\//, ':1/');
    const error = await run.consume({ mode: 'from_floor', filter: everything }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StreamTransportError);
    expect(error).toMatchObject({ code: 'connection_lost' });
    expect(run.logs.filter((l) => l.msg.includes('reconnecting'))).toHaveLength(3);
  });

  it('returns lease_expired when the lease runs out on a quiet stream', async () => {
    const s = await server({ journal: journal(12) });
    const run = makeRun(db.pool, s, 'c-lease');
    await run.consume({ mode: 'from_floor', filter: everything });
    const outcome = await run.consume({ mode: 'resume' }, { leaseMs: 300 });
    expect(outcome).toMatchObject({ kind: 'lease_expired', committed: { position: s.journal.head } });
  });

  it('cancellation during a commit finishes it but sends no ACK', async () => {
    const s = await server({ journal: journal() });
    let cancelOnCommit = false;
    const run = makeRun(db.pool, s, 'c-cancel', {
      hooks: {
        afterCommit: () => {
          if (cancelOnCommit) run.abort.abort();
        },
      },
    });
    await run.consume({ mode: 'from_floor', filter: everything });
    const acked = acksOf(s, 'c-cancel');
    cancelOnCommit = true;
    const outcome = await run.consume({ mode: 'resume' });
    const last = run.committed.at(-1);
    expect(outcome).toMatchObject({ kind: 'cancelled', committed: { position: last } });
    expect(last).toBeGreaterThan(acked.at(-1)!);
    expect((await savedEffects(db.pool, 'c-cancel')).state.checkpoint?.position).toBe(last);
    expect(acksOf(s, 'c-cancel')).toEqual(acked);
  });

  it('a staging bound drops the session each time; past maxAttempts it throws staging_bound_exceeded', async () => {
    const s = await server({ journal: journal() });
    const run = makeRun(db.pool, s, 'c-bound');
    run.deps.config.staging = { maxEvents: 0, maxBytes: 1_000_000, maxAgeMs: 60_000 };
    const error = await run.consume({ mode: 'from_floor', filter: everything }).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'StreamTransportError', code: 'staging_bound_exceeded' });
    expect(run.committed).toEqual([]);
    expect(s.subscriptions.filter((x) => x.consumerId === 'c-bound')).toHaveLength(4);
  });

  it('a malformed frame is rejected with an error naming what was wrong', async () => {
    // A broken server: a valid hello, then text that is not JSON, on every connection.
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
    wss.on('connection', (ws) => {
      ws.send(
        encodeServerFrame({
          type: 'hello',
          frameSequence: 1,
          protocol: PROTOCOL_NAME,
          connectionId: 'x',
          stream: 'polymarket',
          history: { id: 'h', floor: 1, head: 1 },
        }),
      );
      ws.on('message', () => ws.send('{"v":1,"type":"authenticated",'));
    });
    try {
      const s = await server({ journal: journal(5) });
      const run = makeRun(db.pool, s, 'c-malformed');
      run.deps.config.url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}`;
      const error = await run.consume({ mode: 'from_floor', filter: everything }).catch((e: unknown) => e);
      expect(error).toMatchObject({ name: 'StreamTransportError', code: 'protocol_violation' });
      expect(run.logs.find((l) => l.msg === 'rejected a server frame')?.fields).toMatchObject({
        code: 'malformed_json',
      });
      expect(JSON.stringify(run.logs)).not.toContain(API_KEY);
    } finally {
      for (const client of wss.clients) client.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    }
  });
});
