// The paginated history source (docs/protocol.md §8) on the real stack: consumePages against the reference
// server's HTTP endpoint and a real Postgres database. Named after the acceptance oracles of section 7.
import { afterEach, describe, expect, it } from 'vitest';
import {
  consumePages,
  type PageConsumerDeps,
  type PageConsumerHooks,
  type PageHeartbeat,
  type PageOutcome,
  type PageTarget,
} from '../../activities/page-consumer.js';
import { poolPageStore } from '../../activities/index.js';
import { loadPageProgress, type PageProgress } from '../../db/pages.js';
import { PAGE_QUERY, type StreamFilter } from '../../protocol/codec.js';
import type { QuarantineReason } from '../../protocol/types.js';
import { acquireLease } from '../../db/state.js';
import { resolveQuarantine } from '../../db/decisions.js';
import { handOverToStream } from '../../db/page-decisions.js';
import { DEFAULT_RETENTION_POLICY, runMaintenance } from '../../db/retention.js';
import { ConsumerKindMismatch, UnknownConsumer } from '../../db/errors.js';
import {
  addDecimal,
  compareDecimal,
  formatDecimal,
  notional,
  parseDecimal,
  type Decimal,
} from '../../protocol/decimal.js';
import { Journal } from '../../simulator/journal.js';
import type { NewEvent } from '../../simulator/journal-types.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { useTestDatabase } from '../support/db.js';
import { allEvents } from './consume-stream-support.js';
import { appliedEvents } from './reference-fold.js';
import { dumpState, type SavedState } from './state-dump.js';
import { whaleAlertRules } from '../../protocol/types.js';

const db = useTestDatabase();
const API_KEY = 'page-test-key-51d0';
const TOKEN_SECRET = 'page-test-secret';
const MARKET = 'm-oracle';

let servers: ReferenceStreamServer[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});

async function startServer(journal: Journal): Promise<ReferenceStreamServer> {
  const server = await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], tokenSecret: TOKEN_SECRET });
  servers.push(server);
  return server;
}

function oracleTrade(eventId: string, price: string, size = '100'): NewEvent {
  return {
    eventId,
    kind: 'trade',
    entityId: `x-${eventId}`,
    revision: 1,
    observedAt: '2026-11-29T12:00:00.000Z',
    data: {
      market: MARKET,
      asset: 'a-oracle-yes',
      side: 'BUY',
      price,
      size,
      wallet: '0xwhale',
      txHash: `0x${eventId}`,
    },
  };
}

/** Generated transitions 1..`generated` (none in MARKET), then one oracle trade per given event, one position each. */
function oracleJournal(generated: number, events: NewEvent[], seed = 21): Journal {
  const journal = Journal.generate({ seed, transitions: generated });
  for (const event of events) journal.append({ events: [event] });
  return journal;
}

interface Served {
  cursor: string | null;
  status: number;
  next?: string;
  positions?: number[];
}

interface Run {
  outcome: Promise<PageOutcome>;
  abort: AbortController;
  heartbeats: PageHeartbeat[];
  /** Every request that reached the server, with what it answered. */
  served: Served[];
  logs: string[];
}

function run(
  server: ReferenceStreamServer,
  opts: {
    consumerId: string;
    filter?: StreamFilter;
    maxPages?: number;
    limit?: number;
    chunkSize?: number;
    maxAttempts?: number;
    hooks?: PageConsumerHooks;
    /** Runs before each request reaches the server (arm a fault). */
    beforeRequest?: (cursor: string | null) => void;
    whaleAlertMinNotional?: string;
    terminalReasons?: QuarantineReason[];
    apiKey?: string;
    initialBackoffMs?: number;
    /** Runs after each answer was recorded. */
    afterServed?: (served: Served[]) => void;
    target?: PageTarget;
  },
): Run {
  const abort = new AbortController();
  const served: Served[] = [];
  const logs: string[] = [];
  const recordingFetch: typeof fetch = async (input, init) => {
    const cursor = new URL(input instanceof Request ? input.url : input).searchParams.get(PAGE_QUERY.cursor);
    opts.beforeRequest?.(cursor);
    const res = await fetch(input, init);
    const body = (await res.clone().json()) as { next?: string; events?: { position: number }[] };
    served.push({
      cursor,
      status: res.status,
      ...(body.next ? { next: body.next, positions: body.events!.map((e) => e.position) } : {}),
    });
    opts.afterServed?.(served);
    return res;
  };
  const line = (msg: string, fields?: Record<string, unknown>) =>
    void logs.push(`${msg} ${JSON.stringify(fields ?? {})}`);
  const deps: PageConsumerDeps = {
    store: poolPageStore(db.pool),
    config: {
      url: server.httpUrl,
      apiKey: opts.apiKey ?? API_KEY,
      stream: server.stream,
      limit: opts.limit ?? 50,
      chunkSize: opts.chunkSize ?? 10,
      backoff: {
        maxAttempts: opts.maxAttempts ?? 2,
        initialMs: opts.initialBackoffMs ?? 1,
        maxMs: opts.initialBackoffMs ?? 4,
      },
      actions: whaleAlertRules(opts.whaleAlertMinNotional ?? null),
      quarantinePolicy: { terminalReasons: opts.terminalReasons ?? [] },
    },
    fetch: recordingFetch,
    log: { info: line, warn: line, error: line },
    ...(opts.hooks ? { hooks: opts.hooks } : {}),
  };
  const input = {
    consumerId: opts.consumerId,
    filter: opts.filter ?? {},
    ...(opts.maxPages !== undefined ? { maxPages: opts.maxPages } : {}),
    ...(opts.target !== undefined ? { target: opts.target } : {}),
  };
  const heartbeats: PageHeartbeat[] = [];
  const outcome = consumePages(deps, input, {
    heartbeat: (details) => void heartbeats.push(details),
    signal: abort.signal,
  });
  return { outcome, abort, heartbeats, served, logs };
}

async function progress(consumerId: string): Promise<PageProgress> {
  const saved = await loadPageProgress(db.pool, consumerId);
  if (!saved) throw new Error(`no page progress for ${consumerId}`);
  return saved;
}

const receiptIds = (state: SavedState) => state.receipts.map((r) => r.eventId);

describe('overlapping page', () => {
  it('resumes from C7 after a crash after 106: 104..106 recognised, 107 applied once, only then C8 replaces C7', async () => {
    // Positions 1..103 hold no event of MARKET; 104..108 one trade each.
    const journal = oracleJournal(103, [
      oracleTrade('e104', '0.5'),
      oracleTrade('e105', '0.25'),
      oracleTrade('e106', '0.75'),
      oracleTrade('e107', '0.125'),
      oracleTrade('e108', '0.5'),
    ]);
    const server = await startServer(journal);
    const filter = { markets: [MARKET] };
    const consumerId = 'pages-overlap';

    // Saved cursor C7 (the token at 105), applied 105.
    const first = run(server, { consumerId, filter, limit: 2, chunkSize: 1, maxPages: 1 });
    expect((await first.outcome).kind).toBe('page_limit');
    expect(first.served.map((s) => s.positions)).toEqual([[104, 105]]);
    const c7 = first.served[0]!.next!;
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: c7, appliedPosition: 105 });

    // The retried page overlaps (104, 105 again) and runs to 107 with next C8; the run dies right after the
    // chunk holding 106 became durable.
    const crash = new Error('killed after the chunk of 106');
    const crashed = run(server, {
      consumerId,
      filter,
      limit: 4,
      chunkSize: 1,
      beforeRequest: () => (server.faults.pageOverlap = 2),
      hooks: {
        afterChunkCommit: ({ appliedPosition }) => {
          if (appliedPosition === 106) throw crash;
        },
      },
    });
    await expect(crashed.outcome).rejects.toBe(crash);
    expect(crashed.served).toHaveLength(1);
    expect(crashed.served[0]).toMatchObject({ cursor: c7, positions: [104, 105, 106, 107] });
    const c8 = crashed.served[0]!.next!;
    expect(c8).not.toBe(c7);
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: c7, appliedPosition: 106 });
    let state = await dumpState(db.pool, consumerId);
    expect(receiptIds(state)).toEqual(['e104', 'e105', 'e106']);
    expect(state.executions.map((e) => e.entityId)).toEqual(['x-e104', 'x-e105', 'x-e106']);
    expect(state.volumes).toEqual({ [MARKET]: '150/3' });

    // Resume from C7: the same overlapping page; 107 is the only new durable outcome, and the cursor moves to C8
    // only after it.
    const cursorWhen107Committed: (string | null)[] = [];
    const resumed = run(server, {
      consumerId,
      filter,
      limit: 4,
      chunkSize: 1,
      maxPages: 1,
      beforeRequest: () => (server.faults.pageOverlap = 2),
      hooks: {
        afterChunkCommit: async () => void cursorWhen107Committed.push((await progress(consumerId)).resumeCursor),
      },
    });
    const outcome = await resumed.outcome;
    expect(outcome).toMatchObject({
      kind: 'page_limit',
      counters: { requests: 1, pages: 1, recognised: 3, applied: 1, chunks: 1 },
    });
    expect(resumed.served[0]).toMatchObject({ cursor: c7, next: c8, positions: [104, 105, 106, 107] });
    expect(cursorWhen107Committed).toEqual([c7]);
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: c8, appliedPosition: 107 });
    state = await dumpState(db.pool, consumerId);
    expect(state.receipts).toEqual(
      ['e104', 'e105', 'e106', 'e107'].map((eventId) => ({ eventId, outcome: 'applied' })),
    );
    expect(state.executions.map((e) => [e.entityId, e.revision])).toEqual([
      ['x-e104', 1],
      ['x-e105', 1],
      ['x-e106', 1],
      ['x-e107', 1],
    ]);
    expect(state.volumes).toEqual({ [MARKET]: '162.5/4' });
    expect(outcome.progress).toEqual({
      resumeCursor: c8,
      appliedPosition: 107,
      version: (await progress(consumerId)).version,
    });
  });
});

describe('non-advancing token', () => {
  it('backs off a bounded number of times, then stops with non_advancing and changes nothing', async () => {
    const server = await startServer(Journal.generate({ seed: 4, transitions: 30 }));
    const consumerId = 'pages-stuck';
    expect((await run(server, { consumerId, limit: 5, maxPages: 1 }).outcome).kind).toBe('page_limit');
    const before = { progress: await progress(consumerId), state: await dumpState(db.pool, consumerId) };

    // Every page answers its own request cursor as `next` (and carries events).
    const stuck = run(server, {
      consumerId,
      limit: 5,
      maxAttempts: 3,
      beforeRequest: () => (server.faults.pageNonAdvancing = true),
    });
    const outcome = await stuck.outcome;
    expect(outcome).toMatchObject({
      kind: 'non_advancing',
      attempts: 4,
      counters: { requests: 4, pages: 0, chunks: 0, applied: 0 },
    });
    expect(stuck.served).toHaveLength(4);
    for (const s of stuck.served) {
      expect(s.next).toBe(before.progress.resumeCursor);
      expect(s.positions!.length).toBeGreaterThan(0);
    }
    expect(await progress(consumerId)).toEqual(before.progress);
    expect(await dumpState(db.pool, consumerId)).toEqual(before.state);
  });

  it('goes on once the token advances again: the repeated page is applied once', async () => {
    const journal = Journal.generate({ seed: 4, transitions: 30 });
    const server = await startServer(journal);
    const consumerId = 'pages-hiccup';
    const first = run(server, { consumerId, limit: 5, maxPages: 1 });
    await first.outcome;
    let armed = true;
    const hiccup = run(server, {
      consumerId,
      limit: 5,
      maxPages: 1,
      beforeRequest: () => {
        if (armed) server.faults.pageNonAdvancing = true;
        armed = false;
      },
    });
    expect(await hiccup.outcome).toMatchObject({ kind: 'page_limit', counters: { requests: 2, pages: 1 } });
    const [repeated, advanced] = hiccup.served as [Served, Served];
    expect(repeated.next).toBe(repeated.cursor);
    expect(advanced.positions).toEqual(repeated.positions);
    expect(advanced.next).not.toBe(advanced.cursor);
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: advanced.next });
    const state = await dumpState(db.pool, consumerId);
    expect(state.receipts).toHaveLength(first.served[0]!.positions!.length + advanced.positions!.length);
  });

  it('at the head of the journal: the empty repeated page ends the run as caught_up after a bounded backoff', async () => {
    const server = await startServer(Journal.generate({ seed: 4, transitions: 12 }));
    const consumerId = 'pages-head';
    const backfill = run(server, { consumerId, limit: 1000, maxAttempts: 2 });
    const outcome = await backfill.outcome;
    expect(outcome).toMatchObject({ kind: 'caught_up', attempts: 3, counters: { pages: 1, requests: 4 } });
    expect(backfill.served.slice(1).every((s) => s.positions!.length === 0 && s.next === s.cursor)).toBe(true);
  });
});

describe('target', () => {
  it('a history that keeps growing: the run fixes its target at the first page and ends there, never spins', async () => {
    const journal = Journal.generate({ seed: 5, transitions: 60 });
    const server = await startServer(journal);
    const consumerId = 'pages-target-head';
    const head = journal.head;
    // Two live transitions behind every answer: a run without a target would never see a repeated cursor.
    const backfill = run(server, {
      consumerId,
      limit: 10,
      target: 'head',
      afterServed: () => [1, 2].forEach(() => journal.appendGenerated()),
    });
    const outcome = await backfill.outcome;
    expect(outcome).toMatchObject({ kind: 'target_reached', by: 'applied', target: { position: head } });
    expect(outcome.target?.historyId).toBe(journal.historyId);
    expect(outcome.progress.appliedPosition).toBeGreaterThanOrEqual(head);
    // Full pages up to the target, then it stops: no page per live transition.
    expect(outcome.counters.requests).toBe(outcome.counters.pages);
    const full = backfill.served.slice(0, -1).map((s) => s.positions!.length);
    expect(Math.min(...full)).toBeGreaterThanOrEqual(10);
    expect(backfill.served.at(-1)!.positions!.at(-1)).toBe(outcome.progress.appliedPosition);
    expect(backfill.heartbeats.at(-1)).toMatchObject({ target: { position: head } });
    expect(backfill.heartbeats.at(-1)?.head).toBeGreaterThanOrEqual(head);
    // Every event at or below the applied position has its receipt, once.
    const state = await dumpState(db.pool, consumerId);
    const ids = allEvents(journal)
      .filter((e) => e.position <= outcome.progress.appliedPosition)
      .map((e) => e.eventId)
      .sort();
    expect(receiptIds(state).sort()).toEqual(ids);

    // A run resumed at its target asks the source nothing.
    const again = await run(server, { consumerId, target: { position: head, historyId: journal.historyId } }).outcome;
    expect(again).toMatchObject({ kind: 'target_reached', by: 'applied', counters: { requests: 0 } });
    expect(await dumpState(db.pool, consumerId)).toEqual(state);
  });

  it('a sparse filter reaches its target when the source says the reader is at its head past it', async () => {
    // MARKET trades at 31..33 only; the target 40 has no event of the filter at or past it.
    const journal = oracleJournal(30, [oracleTrade('s1', '0.4'), oracleTrade('s2', '0.5'), oracleTrade('s3', '0.6')]);
    for (let i = 0; i < 7; i++) journal.appendGenerated();
    const server = await startServer(journal);
    const consumerId = 'pages-target-sparse';
    const backfill = run(server, { consumerId, filter: { markets: [MARKET] }, target: 'head', maxAttempts: 5 });
    const outcome = await backfill.outcome;
    expect(outcome).toMatchObject({ kind: 'target_reached', by: 'head', target: { position: 40 } });
    expect(outcome.progress.appliedPosition).toBe(33);
    // The first repeated cursor with nothing new ends it: no backoff through every attempt.
    const last = backfill.served.at(-1)!;
    expect(last.next).toBe(last.cursor);
    expect(backfill.served.filter((s) => s.next === s.cursor)).toHaveLength(1);
    expect(receiptIds(await dumpState(db.pool, consumerId)).sort()).toEqual(['s1', 's2', 's3']);
  });

  it('a target above the head: caught_up once the source repeats its cursor through the backoff, nothing lost', async () => {
    const journal = Journal.generate({ seed: 6, transitions: 15 });
    const server = await startServer(journal);
    const consumerId = 'pages-target-above';
    const outcome = await run(server, { consumerId, limit: 100, target: { position: 40, historyId: null } }).outcome;
    expect(outcome).toMatchObject({
      kind: 'caught_up',
      target: { position: 40, historyId: journal.historyId },
      sourceHistory: { head: 15 },
      progress: { appliedPosition: 15 },
    });
  });

  it('a target of another history cannot be reached: reset (history_rebuilt), nothing applied', async () => {
    const journal = Journal.generate({ seed: 6, transitions: 15 });
    const server = await startServer(journal);
    const consumerId = 'pages-target-rebuilt';
    const outcome = await run(server, { consumerId, target: { position: 10, historyId: 'an-older-history' } }).outcome;
    expect(outcome).toMatchObject({
      kind: 'reset',
      reason: 'history_rebuilt',
      history: { id: journal.historyId },
      counters: { chunks: 0, pages: 0 },
    });
    expect(await progress(consumerId)).toMatchObject({ appliedPosition: 0, resumeCursor: null });
  });
});

/** The journal folded by hand: latest revision per entity, volume and count per market, whale alerts once. */
function referenceFold(journal: Journal, whaleAlertMinNotional: string) {
  const latest = new Map<string, { revision: number; market: string; notional: string }>();
  const alerts: string[] = [];
  const events = allEvents(journal);
  for (const event of appliedEvents(events)) {
    const data = event.data as { market: string; price: string; size: string };
    const amount = notional(data.price, data.size);
    latest.set(event.entityId, { revision: event.revision, market: data.market, notional: amount });
    if (compareDecimal(parseDecimal(amount), parseDecimal(whaleAlertMinNotional)) >= 0)
      alerts.push(`whale_alert:${event.eventId}`);
  }
  const volumes = new Map<string, { volume: Decimal; count: number }>();
  for (const execution of latest.values()) {
    const v = volumes.get(execution.market) ?? { volume: parseDecimal('0'), count: 0 };
    volumes.set(execution.market, {
      volume: addDecimal(v.volume, parseDecimal(execution.notional)),
      count: v.count + 1,
    });
  }
  return {
    executions: [...latest.entries()]
      .map(([entityId, e]) => [entityId, e.revision, e.notional])
      .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
    volumes: Object.fromEntries(
      [...volumes.entries()]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([m, v]) => [m, `${formatDecimal(v.volume)}/${v.count}`]),
    ),
    alerts: alerts.sort(),
    eventIds: events.map((e) => e.eventId).sort(),
  };
}

describe('full backfill', () => {
  it('equals a reference fold of the journal, each effect once, through overlapping pages and small chunks', async () => {
    const journal = Journal.generate({ seed: 8, transitions: 150, correctionRate: 0.25 });
    const server = await startServer(journal);
    const consumerId = 'pages-backfill';
    let requests = 0;
    const backfill = run(server, {
      consumerId,
      limit: 9,
      chunkSize: 4,
      maxAttempts: 1,
      whaleAlertMinNotional: '500',
      // Every third page re-serves the events of the two transitions before its cursor.
      beforeRequest: (cursor) => {
        requests += 1;
        if (cursor !== null && requests % 3 === 0) server.faults.pageOverlap = 2;
      },
    });
    const outcome = await backfill.outcome;
    expect(outcome.kind).toBe('caught_up');
    expect(outcome.counters.recognised).toBeGreaterThan(0);

    const fold = referenceFold(journal, '500');
    const state = await dumpState(db.pool, consumerId);
    expect(
      state.executions
        .map((e) => [e.entityId, e.revision, e.notional])
        .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
    ).toEqual(fold.executions);
    expect(state.volumes).toEqual(fold.volumes);
    expect(state.outbox).toEqual(fold.alerts);
    expect(fold.alerts.length).toBeGreaterThan(0);
    expect(receiptIds(state).sort()).toEqual(fold.eventIds);
    expect(state.quarantine).toEqual([]);
    const saved = await progress(consumerId);
    expect(saved).toMatchObject({ appliedPosition: journal.head, historyId: journal.historyId });
    expect(backfill.heartbeats.at(-1)).toMatchObject({ appliedPosition: journal.head, version: saved.version });
    expect(JSON.stringify(backfill.heartbeats)).not.toContain(API_KEY);

    // A second run from the saved cursor finds nothing new and changes nothing.
    const again = await run(server, { consumerId, maxAttempts: 0 }).outcome;
    expect(again).toMatchObject({ kind: 'caught_up', counters: { requests: 1, applied: 0 } });
    expect(await dumpState(db.pool, consumerId)).toEqual(state);
  });

  it('hands over to the stream with the events its chunks applied, also once retention removed receipts', async () => {
    const journal = Journal.generate({ seed: 9, transitions: 60, correctionRate: 0.25 });
    const server = await startServer(journal);
    const consumerId = 'pages-handover-total';
    const outcome = await run(server, { consumerId, limit: 7, chunkSize: 3, maxAttempts: 1 }).outcome;
    expect(outcome.kind).toBe('caught_up');
    const applied = (await dumpState(db.pool, consumerId)).receipts.filter((r) => r.outcome === 'applied').length;
    expect(applied).toBe(outcome.counters.applied);
    // What retention does below a floor the source announced: the receipts go, the effects stay.
    const removed = await db.pool.query('DELETE FROM event_receipts WHERE consumer_id = $1 AND position <= $2', [
      consumerId,
      Math.floor(journal.head / 2),
    ]);
    expect(removed.rowCount).toBeGreaterThan(0);

    const saved = await progress(consumerId);
    expect(await handOverToStream(db.pool, { consumerId, expectedVersion: saved.version })).toEqual({
      kind: 'handed_over',
      appliedPosition: journal.head,
    });
    expect(await loadPageProgress(db.pool, consumerId)).toBeNull();
    const stream = await db.pool.query<{ events_applied: string; pending_start: string }>(
      'SELECT events_applied, pending_start FROM checkpoints WHERE consumer_id = $1',
      [consumerId],
    );
    expect(stream.rows).toEqual([{ events_applied: String(applied), pending_start: 'from_floor' }]);
  });
});

describe('retention', () => {
  it('a backfill saves the floor its pages announce, so maintenance removes its receipts below it', async () => {
    const journal = Journal.generate({ seed: 10, transitions: 40 });
    const server = await startServer(journal);
    const consumerId = 'pages-floor';
    expect((await run(server, { consumerId, limit: 50, maxAttempts: 0 }).outcome).kind).toBe('caught_up');
    const positions = async () =>
      (
        await db.pool.query<{ position: string }>(
          'SELECT position FROM event_receipts WHERE consumer_id = $1 ORDER BY position',
          [consumerId],
        )
      ).rows.map((r) => Number(r.position));
    const before = await positions();
    const floor = Math.floor(journal.head / 2);
    expect(before.some((p) => p < floor)).toBe(true);

    // A tailing backfill's next run is at the head: its page moves nothing, but announces the risen floor.
    journal.setRetentionFloor(floor);
    expect((await run(server, { consumerId, maxAttempts: 0 }).outcome).kind).toBe('caught_up');
    const saved = await db.pool.query('SELECT history_id, floor FROM retention_floors WHERE consumer_id = $1', [
      consumerId,
    ]);
    expect(saved.rows).toEqual([{ history_id: journal.historyId, floor: String(floor) }]);

    const report = await runMaintenance(db.pool, { ...DEFAULT_RETENTION_POLICY, batchRows: 5 });
    expect(report.consumers.find((c) => c.consumerId === consumerId)).toMatchObject({ floor, prunedBelow: floor });
    expect(await positions()).toEqual(before.filter((p) => p >= floor));
    // The backfill goes on from its cursor as before: nothing below the floor is asked for again.
    expect((await run(server, { consumerId, maxAttempts: 0 }).outcome).kind).toBe('caught_up');
  });
});

describe('conflict', () => {
  // Two servers over the same history (same seed, same token secret): the second one serves an eventId the
  // consumer already holds with different content.
  const journalWith = (tail: NewEvent[]) => oracleJournal(20, tail, 33);

  it('a fresh event whose eventId has a receipt with other content aborts its chunk; the cursor stays', async () => {
    const original = await startServer(journalWith([oracleTrade('e21', '0.5')]));
    const consumerId = 'pages-conflict';
    const filter = { markets: [MARKET] };
    await run(original, { consumerId, filter, maxPages: 1 }).outcome;
    const saved = await progress(consumerId);
    expect(saved.appliedPosition).toBe(21);
    await original.close();

    const changed = await startServer(
      journalWith([oracleTrade('e21b', '0.5'), oracleTrade('e22', '0.25'), oracleTrade('e21', '0.9')]),
    );
    const resumed = run(changed, { consumerId, filter, chunkSize: 1 });
    const outcome = await resumed.outcome;
    expect(resumed.served[0]).toMatchObject({ cursor: saved.resumeCursor, positions: [22, 23] });
    expect(outcome).toMatchObject({ kind: 'conflict', eventId: 'e21', counters: { chunks: 1, pages: 0 } });
    // 22 got its durable outcome in its own chunk; the conflicting chunk wrote nothing; the cursor did not move.
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: saved.resumeCursor, appliedPosition: 22 });
    const state = await dumpState(db.pool, consumerId);
    expect(receiptIds(state)).toEqual(['e21', 'e22']);
    expect(state.executions.map((e) => [e.entityId, e.notional])).toEqual([
      ['x-e21', '50'],
      ['x-e22', '25'],
    ]);
  });

  it('a recognised event of an overlapping page whose content changed aborts before anything is applied', async () => {
    const original = await startServer(journalWith([oracleTrade('e21', '0.5')]));
    const consumerId = 'pages-conflict-overlap';
    const filter = { markets: [MARKET] };
    await run(original, { consumerId, filter, maxPages: 1 }).outcome;
    const before = { progress: await progress(consumerId), state: await dumpState(db.pool, consumerId) };
    await original.close();

    const changed = await startServer(journalWith([oracleTrade('e21', '0.9'), oracleTrade('e22', '0.25')]));
    const outcome = await run(changed, { consumerId, filter, beforeRequest: () => (changed.faults.pageOverlap = 1) })
      .outcome;
    expect(outcome).toMatchObject({ kind: 'conflict', eventId: 'e21', counters: { chunks: 0 } });
    expect(await progress(consumerId)).toEqual(before.progress);
    expect(await dumpState(db.pool, consumerId)).toEqual(before.state);
  });
});

describe('unrecognised event', () => {
  it('an event inside the durable prefix without a receipt stops the run before anything is applied', async () => {
    // Same history, but the second server's transition at 21 holds one more event than the consumer was served.
    const original = await startServer(oracleJournal(20, [oracleTrade('e21', '0.5')], 33));
    const consumerId = 'pages-unrecognised';
    const filter = { markets: [MARKET] };
    await run(original, { consumerId, filter, maxPages: 1 }).outcome;
    const before = { progress: await progress(consumerId), state: await dumpState(db.pool, consumerId) };
    await original.close();

    const rewritten = Journal.generate({ seed: 33, transitions: 20 });
    rewritten.append({ events: [oracleTrade('e21', '0.5'), oracleTrade('e21-late', '0.5')] });
    rewritten.append({ events: [oracleTrade('e22', '0.5')] });
    const changed = await startServer(rewritten);
    const outcome = await run(changed, { consumerId, filter, beforeRequest: () => (changed.faults.pageOverlap = 1) })
      .outcome;
    expect(outcome).toMatchObject({
      kind: 'unrecognised_event',
      eventId: 'e21-late',
      position: 21,
      counters: { recognised: 0, chunks: 0 },
    });
    expect(await progress(consumerId)).toEqual(before.progress);
    expect(await dumpState(db.pool, consumerId)).toEqual(before.state);
  });
});

describe('expired cursor', () => {
  it('keeps the cursor and reports reset when the cursor fell below the retention floor', async () => {
    const journal = Journal.generate({ seed: 6, transitions: 40 });
    const server = await startServer(journal);
    const consumerId = 'pages-expired';
    await run(server, { consumerId, limit: 5, maxPages: 1 }).outcome;
    const before = { progress: await progress(consumerId), state: await dumpState(db.pool, consumerId) };
    journal.setRetentionFloor(30);

    const expired = run(server, { consumerId, limit: 5 });
    const outcome = await expired.outcome;
    expect(outcome).toMatchObject({
      kind: 'reset',
      reason: 'cursor_expired',
      refusedToken: before.progress.resumeCursor,
      history: { floor: 30 },
      progress: { resumeCursor: before.progress.resumeCursor },
      counters: { requests: 1 },
    });
    expect(await progress(consumerId)).toEqual(before.progress);
    expect(await dumpState(db.pool, consumerId)).toEqual(before.state);
  });

  it('never puts the API key in a log line or an outcome', async () => {
    const server = await startServer(Journal.generate({ seed: 6, transitions: 10 }));
    const consumerId = 'pages-secret';
    await run(server, { consumerId, maxPages: 1 }).outcome;
    const stuck = run(server, { consumerId, maxAttempts: 1, beforeRequest: () => (server.faults.pageExpired = true) });
    const outcome = await stuck.outcome;
    expect(outcome.kind).toBe('reset');
    expect(JSON.stringify(outcome)).not.toContain(API_KEY);
    expect(stuck.logs.join('\n')).not.toContain(API_KEY);
  });
});

describe('zero-item pages', () => {
  it('an empty page with a new token advances the cursor and nothing else', async () => {
    // The source scans at most 5000 transitions per page: a filter matching nothing answers empty pages with new
    // tokens.
    const journal = Journal.generate({ seed: 2, transitions: 5100 });
    const server = await startServer(journal);
    const consumerId = 'pages-zero-item';
    const sparse = run(server, { consumerId, filter: { markets: ['m-none'] }, maxAttempts: 0 });
    const outcome = await sparse.outcome;
    expect(outcome).toMatchObject({ kind: 'caught_up', counters: { pages: 2, requests: 3, chunks: 0 } });
    expect(sparse.served.map((s) => s.positions)).toEqual([[], [], []]);
    const [first, second, head] = sparse.served as [Served, Served, Served];
    expect(second.cursor).toBe(first.next);
    expect(head).toMatchObject({ cursor: second.next, next: second.next });
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: second.next, appliedPosition: 0 });
    expect((await dumpState(db.pool, consumerId)).receipts).toEqual([]);
  });
});

describe('stops', () => {
  const mystery = (eventId: string): NewEvent => ({ ...oracleTrade(eventId, '0.5'), kind: 'mystery_kind' });

  it('a held quarantine stops with the cursor unchanged; a policy that makes the reason terminal goes on', async () => {
    const server = await startServer(
      oracleJournal(3, [oracleTrade('e4', '0.5'), mystery('e5'), oracleTrade('e6', '0.5')]),
    );
    const consumerId = 'pages-held';
    const held = await run(server, { consumerId, chunkSize: 1 }).outcome;
    expect(held).toMatchObject({
      kind: 'held_quarantine',
      items: [{ eventId: 'e5', reason: 'unsupported_kind', position: 5 }],
    });
    expect(await progress(consumerId)).toMatchObject({ resumeCursor: null, appliedPosition: 4 });
    let state = await dumpState(db.pool, consumerId);
    expect(state.quarantine).toEqual([{ eventId: 'e5', disposition: 'held', reason: 'unsupported_kind' }]);
    expect(receiptIds(state)).not.toContain('e5');

    const released = await run(server, {
      consumerId,
      chunkSize: 1,
      terminalReasons: ['unsupported_kind'],
      maxAttempts: 0,
    }).outcome;
    expect(released.kind).toBe('caught_up');
    expect(await progress(consumerId)).toMatchObject({ appliedPosition: 6 });
    state = await dumpState(db.pool, consumerId);
    expect(state.quarantine).toEqual([{ eventId: 'e5', disposition: 'terminal', reason: 'unsupported_kind' }]);
    expect(state.receipts.filter((r) => ['e4', 'e5', 'e6'].includes(r.eventId))).toEqual([
      { eventId: 'e4', outcome: 'applied' },
      { eventId: 'e5', outcome: 'quarantined' },
      { eventId: 'e6', outcome: 'applied' },
    ]);
  });

  it('a held quarantine of a page consumer is released by an operator decision; the next run goes on', async () => {
    const server = await startServer(
      oracleJournal(3, [oracleTrade('e4', '0.5'), mystery('e5'), oracleTrade('e6', '0.5')]),
    );
    const consumerId = 'pages-released';
    expect(await run(server, { consumerId, chunkSize: 1 }).outcome).toMatchObject({
      kind: 'held_quarantine',
      items: [{ eventId: 'e5' }],
    });
    const before = await progress(consumerId);

    const resolved = await resolveQuarantine(db.pool, {
      consumerId,
      decision: 'release_terminal',
      actor: 'ops',
      reason: 'unknown kind is not ours',
    });
    expect(resolved).toBe(1);
    // The decision changes the quarantine record only: the cursor and the durable prefix are where they were.
    expect(await progress(consumerId)).toEqual(before);
    const { rows: decisions } = await db.pool.query(
      'SELECT kind, decision, actor, reason, replaced_token, details FROM decisions WHERE consumer_id = $1',
      [consumerId],
    );
    expect(decisions).toEqual([
      {
        kind: 'quarantine',
        decision: 'release_terminal',
        actor: 'ops',
        reason: 'unknown kind is not ours',
        replaced_token: null,
        details: { eventIds: ['e5'] },
      },
    ]);

    // No terminal policy this time: the operator's release is what lets the run go on.
    expect((await run(server, { consumerId, chunkSize: 1, maxAttempts: 0 }).outcome).kind).toBe('caught_up');
    expect(await progress(consumerId)).toMatchObject({ appliedPosition: 6 });
    const state = await dumpState(db.pool, consumerId);
    expect(state.quarantine).toEqual([{ eventId: 'e5', disposition: 'terminal', reason: 'unsupported_kind' }]);
    expect(state.receipts.filter((r) => ['e4', 'e5', 'e6'].includes(r.eventId))).toEqual([
      { eventId: 'e4', outcome: 'applied' },
      { eventId: 'e5', outcome: 'quarantined' },
      { eventId: 'e6', outcome: 'applied' },
    ]);
    const { rows: decided } = await db.pool.query('SELECT decided_by, why FROM quarantine WHERE consumer_id = $1', [
      consumerId,
    ]);
    expect(decided).toEqual([{ decided_by: 'ops', why: 'unknown kind is not ours' }]);
  });

  it('a quarantine decision for an id with no progress of either kind is refused', async () => {
    await expect(
      resolveQuarantine(db.pool, { consumerId: 'pages-nobody', decision: 'retry', actor: 'ops', reason: 'x' }),
    ).rejects.toBeInstanceOf(UnknownConsumer);
  });

  it('a run whose progress another run moved stops as fenced without writing', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 20 }));
    const consumerId = 'pages-fenced';
    let moved = false;
    const fenced = await run(server, {
      consumerId,
      chunkSize: 3,
      hooks: {
        afterChunkCommit: async () => {
          if (moved) return;
          moved = true;
          await db.pool.query('UPDATE page_progress SET version = version + 1 WHERE consumer_id = $1', [consumerId]);
        },
      },
    }).outcome;
    const saved = await progress(consumerId);
    expect(fenced).toMatchObject({ kind: 'fenced', actualVersion: saved.version, counters: { chunks: 1 } });
    expect(saved).toMatchObject({ resumeCursor: null, appliedPosition: fenced.progress.appliedPosition, version: 2 });
  });

  it('a consumer keeps its filter, and a stream consumer id is not a page consumer', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 10 }));
    await run(server, { consumerId: 'pages-bound', filter: { kinds: ['trade'] }, maxPages: 1 }).outcome;
    const other = run(server, { consumerId: 'pages-bound', filter: { kinds: ['correction'] } });
    expect(await other.outcome).toMatchObject({ kind: 'binding_mismatch', counters: { requests: 0 } });

    await acquireLease(db.pool, 'stream-consumer');
    const stream = run(server, { consumerId: 'stream-consumer' });
    const refused = await stream.outcome;
    expect(refused).toMatchObject({ kind: 'binding_mismatch', counters: { requests: 0 } });
    expect(refused.kind === 'binding_mismatch' && refused.message).toMatch(/is a stream consumer/);
    expect(await loadPageProgress(db.pool, 'stream-consumer')).toBeNull();
  });

  it('a page consumer id is not a stream consumer: acquireLease refuses it and creates no checkpoint', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 10 }));
    await run(server, { consumerId: 'pages-only', maxPages: 1 }).outcome;
    const refused = acquireLease(db.pool, 'pages-only');
    await expect(refused).rejects.toBeInstanceOf(ConsumerKindMismatch);
    await expect(refused).rejects.toMatchObject({
      code: 'consumer_kind_mismatch',
      consumerId: 'pages-only',
      actualKind: 'page',
    });
    const { rowCount } = await db.pool.query('SELECT 1 FROM checkpoints WHERE consumer_id = $1', ['pages-only']);
    expect(rowCount).toBe(0);
  });

  it('a configuration that cannot work is refused before any request', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 10 }));
    const refused = run(server, { consumerId: 'pages-config', chunkSize: 0 });
    await expect(refused.outcome).rejects.toMatchObject({ code: 'invalid_page_consumer_config', field: 'chunkSize' });
    expect(refused.served).toEqual([]);
    expect(await loadPageProgress(db.pool, 'pages-config')).toBeNull();
  });

  it('an unknown API key stops at once as unauthorized, without the key in logs or outcome', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 10 }));
    const wrongKey = 'wrong-key-9a7e';
    const refused = run(server, { consumerId: 'pages-unauthorized', apiKey: wrongKey });
    const outcome = await refused.outcome;
    expect(outcome).toMatchObject({
      kind: 'source_failed',
      code: 'unauthorized',
      retryable: false,
      status: 401,
      counters: { requests: 1 },
    });
    expect(JSON.stringify(outcome)).not.toContain(wrongKey);
    expect(refused.logs.join('\n')).not.toContain(wrongKey);
  });

  it('an unreachable source is retried a bounded number of times, then reported', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 10 }));
    await server.close();
    let attempts = 0;
    const outcome = await run(server, {
      consumerId: 'pages-unreachable',
      maxAttempts: 2,
      beforeRequest: () => void (attempts += 1),
    }).outcome;
    expect(outcome).toMatchObject({
      kind: 'source_failed',
      code: 'unavailable',
      retryable: true,
      status: null,
      counters: { requests: 3 },
    });
    expect(attempts).toBe(3);
  });

  it('cancellation during a backoff returns cancelled with the progress saved so far', async () => {
    const server = await startServer(Journal.generate({ seed: 5, transitions: 10 }));
    const consumerId = 'pages-cancelled';
    await run(server, { consumerId, maxPages: 1, limit: 3 }).outcome;
    const before = await progress(consumerId);
    const cancelled = run(server, {
      consumerId,
      maxAttempts: 5,
      initialBackoffMs: 600_000,
      beforeRequest: () => (server.faults.pageNonAdvancing = true),
      afterServed: () => cancelled.abort.abort(),
    });
    expect(await cancelled.outcome).toMatchObject({ kind: 'cancelled', counters: { requests: 1 } });
    expect(await progress(consumerId)).toEqual(before);
  });
});
