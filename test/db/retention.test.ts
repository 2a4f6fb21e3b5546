// Retention on a real Postgres (docs/design.md#retention): what maintenance removes, what it keeps, that what it
// removed is never applied twice, and that a commit waiting on one of its statements still commits within its bound.
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  acquireLease,
  commitCheckpoint,
  createPool,
  DEFAULT_RETENTION_POLICY,
  lastMaintenanceRun,
  loadCommitted,
  recordRetentionFloor,
  runMaintenance,
  tableSizes,
  type RetentionPolicy,
} from '../../db/index.js';
import { DEFAULT_SESSION_BOUNDS } from '../../db/session-settings.js';
import { committed, correction, HISTORY_ID, makePlan, trade } from '../../bench/fixtures.js';
import type { StagedEvent } from '../../protocol/types.js';
import { useTestDatabase } from '../support/db.js';
import { waitFor } from '../support/wait.js';
import { dumpState } from './state-dump.js';

const db = useTestDatabase();
const WHALE = { price: '0.5', size: '2000' };

type Fence = { leaseEpoch: number; version: number };

/** A consumer bound to HISTORY_ID whose first checkpoint (from_floor) applies `events` at `position`. */
async function startConsumer(position: number, events: StagedEvent[]): Promise<{ consumerId: string; fence: Fence }> {
  const consumerId = `c-${randomUUID()}`;
  const lease = await acquireLease(db.pool, consumerId);
  const result = await commitCheckpoint(
    db.pool,
    makePlan(consumerId, {
      fence: { leaseEpoch: lease.leaseEpoch, version: lease.version },
      position,
      events,
      startMode: 'from_floor',
      whaleAlertMinNotional: '450',
      terminalReasons: ['unknown_correction_target'],
    }),
  );
  return { consumerId, fence: { leaseEpoch: lease.leaseEpoch, version: committed(result).version } };
}

/** Trades at positions 1..n (one whale at 2), a correction of the trade at 3 at position n + 1. */
function history(n: number): StagedEvent[] {
  const events = Array.from({ length: n }, (_, i) => trade(i + 1, `e-${i + 1}`, i + 1 === 2 ? WHALE : {}));
  events.push(correction(n + 1, 'e-3', 2, { size: '250' }));
  return events;
}

async function receiptPositions(consumerId: string): Promise<number[]> {
  const res = await db.pool.query<{ position: string }>(
    'SELECT position FROM event_receipts WHERE consumer_id = $1 ORDER BY position',
    [consumerId],
  );
  return res.rows.map((row) => Number(row.position));
}

const policy = (overrides: Partial<RetentionPolicy> = {}): RetentionPolicy => ({
  ...DEFAULT_RETENTION_POLICY,
  batchRows: 3,
  ...overrides,
});

describe('receipts below the floor', () => {
  it('goes for the bound history only: at and above the floor, and quarantined events, stay; a second run removes nothing', async () => {
    const orphan = correction(11, 'never-traded', 2);
    const { consumerId } = await startConsumer(11, [...history(10).slice(0, 10), orphan]);
    expect(await receiptPositions(consumerId)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);

    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 7 });
    const first = await runMaintenance(db.pool, policy());
    const pruning = first.consumers.find((c) => c.consumerId === consumerId);
    expect(pruning).toMatchObject({ floor: 7, prunedBelow: 7, receiptsDeleted: 6 });
    expect(await receiptPositions(consumerId)).toEqual([7, 8, 9, 10, 11]);

    // The quarantined correction sits below a later floor and keeps its receipt beside its quarantine row.
    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 12 });
    await runMaintenance(db.pool, policy());
    expect(await receiptPositions(consumerId)).toEqual([11]);

    const again = await runMaintenance(db.pool, policy());
    expect(again.consumers.find((c) => c.consumerId === consumerId)).toMatchObject({
      receiptsDeleted: 0,
      skipped: 'nothing_below_floor',
    });
    expect(await lastMaintenanceRun(db.pool)).toMatchObject({ id: again.runId, status: 'succeeded' });
  });

  it('a floor announced by a rebuilt history removes nothing until the consumer is bound to it', async () => {
    const { consumerId } = await startConsumer(10, history(9));
    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 4 });
    await recordRetentionFloor(db.pool, consumerId, { id: 'hist-rebuilt', floor: 9 });
    const report = await runMaintenance(db.pool, policy());
    expect(report.consumers.find((c) => c.consumerId === consumerId)).toMatchObject({
      historyId: 'hist-rebuilt',
      prunedBelow: 0,
      skipped: 'history_not_bound',
    });
    expect(await receiptPositions(consumerId)).toHaveLength(10);
  });

  it('within one history the saved floor only rises', async () => {
    const consumerId = `c-${randomUUID()}`;
    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 50 });
    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 20 });
    const res = await db.pool.query('SELECT history_id, floor FROM retention_floors WHERE consumer_id = $1', [
      consumerId,
    ]);
    expect(res.rows).toEqual([{ history_id: HISTORY_ID, floor: '50' }]);
  });
});

describe('what maintenance removed is never applied twice', () => {
  it('a redelivery at the same positions and a rebuilt history at new ones change nothing', async () => {
    const { consumerId, fence } = await startConsumer(11, history(10));
    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 12 });
    await runMaintenance(db.pool, policy());
    expect(await receiptPositions(consumerId)).toEqual([]);
    const before = await dumpState(db.pool, consumerId);
    const totalsBefore = (await loadCommitted(db.pool, consumerId))?.totals;
    expect(before.outbox).toEqual(['whale_alert:ev-2-1']);

    // The same events again (ids and content) just above the checkpoint (an overlapping redelivery), then at
    // positions 100.. (a rebuilt history replayed from its floor). Each is new to the receipts; the revisions say
    // "already reflected".
    const at = (first: number) => history(10).map((event, i) => ({ ...event, position: first + i }));
    let version = fence.version;
    for (const [position, events] of [
      [22, at(12)],
      [110, at(100)],
    ] as const) {
      const result = committed(
        await commitCheckpoint(
          db.pool,
          makePlan(consumerId, {
            fence: { leaseEpoch: fence.leaseEpoch, version },
            position,
            events: [...events],
            whaleAlertMinNotional: '450',
          }),
        ),
      );
      version = result.version;
    }

    const after = await dumpState(db.pool, consumerId);
    expect(after.executions).toEqual(before.executions);
    expect(after.revisions).toEqual(before.revisions);
    expect(after.volumes).toEqual(before.volumes);
    expect(after.outbox).toEqual(before.outbox);
    expect(after.receipts.every((r) => r.outcome === 'no_effect')).toBe(true);
    // The overlap wrote one no_effect receipt per event; the rebuilt history met those (duplicates).
    expect(after.receipts).toHaveLength(11);
    const totalsAfter = (await loadCommitted(db.pool, consumerId))?.totals;
    expect(totalsAfter?.eventsApplied).toBe(totalsBefore?.eventsApplied);
  });
});

describe('finished alerts and superseded revisions', () => {
  it('finished alerts go after their age; waiting and dead ones stay', async () => {
    const events = [1, 2, 3, 4].map((p) => trade(p, `w-${p}`, WHALE));
    const { consumerId } = await startConsumer(4, events);
    const ids = (
      await db.pool.query<{ id: string }>('SELECT id FROM outbox WHERE consumer_id = $1 ORDER BY id', [consumerId])
    ).rows.map((r) => r.id);
    expect(ids).toHaveLength(4);
    // 40 days pass for every alert of the database (ids keep following creation); of these four, one was sent, one
    // suppressed, one failed for good, one is still waiting.
    await db.pool.query(
      `UPDATE outbox SET created_at = created_at - interval '40 days', updated_at = updated_at - interval '40 days',
              completed_at = completed_at - interval '40 days'`,
    );
    await db.pool.query(
      `UPDATE outbox SET completed_at = CASE WHEN id = ANY($2::bigint[]) THEN now() - interval '40 days' END,
              status = CASE id WHEN $3::bigint THEN 'done' WHEN $4::bigint THEN 'suppressed' WHEN $5::bigint THEN 'dead'
                               ELSE 'pending' END,
              suppressed_reason = CASE WHEN id = $4::bigint THEN 'replay' END
        WHERE consumer_id = $1`,
      [consumerId, [ids[0], ids[1]], ids[0], ids[1], ids[2]],
    );
    await runMaintenance(db.pool, policy({ outboxDays: 30 }));
    const left = await db.pool.query<{ status: string }>(
      'SELECT status FROM outbox WHERE consumer_id = $1 ORDER BY id',
      [consumerId],
    );
    expect(left.rows.map((r) => r.status)).toEqual(['dead', 'pending']);
  });

  it('superseded revisions stay by default and go after their age when a policy says so', async () => {
    const { consumerId } = await startConsumer(3, [
      trade(1, 'r-1'),
      correction(2, 'r-1', 2, { size: '20' }),
      correction(3, 'r-1', 3, { size: '30' }),
    ]);
    const count = async () =>
      (
        await db.pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM execution_revisions WHERE consumer_id = $1',
          [consumerId],
        )
      ).rows[0]?.n;
    expect(await count()).toBe(2);
    await db.pool.query(
      `UPDATE execution_revisions SET created_at = now() - interval '10 days' WHERE consumer_id = $1 AND revision = 1`,
      [consumerId],
    );
    await runMaintenance(db.pool, policy());
    expect(await count()).toBe(2);
    await runMaintenance(db.pool, policy({ revisionDays: 7 }));
    expect(await count()).toBe(1);
    expect((await dumpState(db.pool, consumerId)).executions).toMatchObject([{ entityId: 'r-1', revision: 3 }]);
  });

  it('status reads the sizes of the consumer tables from the catalogue', async () => {
    await db.pool.query('ANALYZE event_receipts');
    const sizes = await tableSizes(db.pool);
    expect(sizes.map((s) => s.table)).toContain('event_receipts');
    const receipts = sizes.find((s) => s.table === 'event_receipts');
    expect(receipts?.tableBytes).toBeGreaterThan(0);
    expect(receipts?.indexBytes).toBeGreaterThan(0);
  });
});

describe('a commit beside maintenance', () => {
  // A commit pool with the production bounds: a lock wait longer than 3 s fails the commit.
  let commitPool: pg.Pool;
  beforeAll(() => {
    commitPool = createPool(db.url, { bounds: DEFAULT_SESSION_BOUNDS });
  });
  afterAll(async () => {
    await commitPool.end();
  });

  /**
   * Holds a maintenance removal open at the end of its statement (its rows deleted, every lock it takes held) while
   * the consumer commits new events and a redelivery of the very receipts being removed. `alsoLock` adds what a
   * naive maintenance might take to serialise with commits. Released by clearing the hold and cancelling the sleep.
   */
  async function commitBesideHeldRemoval(alsoLock: string) {
    const { consumerId, fence } = await startConsumer(6, history(5));
    await recordRetentionFloor(db.pool, consumerId, { id: HISTORY_ID, floor: 7 });
    await db.pool.query(`
      CREATE TABLE IF NOT EXISTS hold_removal_on (id int);
      INSERT INTO hold_removal_on VALUES (1);
      CREATE OR REPLACE FUNCTION hold_removal() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF EXISTS (SELECT 1 FROM hold_removal_on) THEN ${alsoLock} PERFORM pg_sleep(60); END IF;
          RETURN NULL;
        END $$;
      CREATE OR REPLACE TRIGGER hold_removal AFTER DELETE ON event_receipts
        FOR EACH STATEMENT EXECUTE FUNCTION hold_removal();`);
    const maintenance = runMaintenance(db.pool, policy({ batchRows: 100, statementTimeoutMs: 60_000 }));
    maintenance.catch(() => undefined);
    await waitFor(async () => (await backendsWaiting("wait_event = 'PgSleep'")) > 0, {
      description: 'the removal statement held open',
      intervalMs: 20,
    });

    const redelivered = history(5).map((event, i) => ({ ...event, position: 10 + i }));
    const fresh = [trade(16, 'beside-1'), trade(16, 'beside-2', {}, { ordinal: 2 })];
    const outcome = await commitCheckpoint(
      commitPool,
      makePlan(consumerId, { fence, position: 16, events: [...redelivered, ...fresh], whaleAlertMinNotional: '450' }),
    ).then(
      (result) => ({ result, error: null }),
      (error: unknown) => ({ result: null, error }),
    );
    const removalStillHeld = (await backendsWaiting("wait_event = 'PgSleep'")) > 0;

    await db.pool.query('DELETE FROM hold_removal_on');
    await db.pool.query(
      `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event = 'PgSleep'`,
    );
    const run = await maintenance.then(
      (report) => ({ report, error: null }),
      (error: unknown) => ({ report: null, error }),
    );
    await db.pool.query('DROP TRIGGER hold_removal ON event_receipts');
    return { consumerId, outcome, removalStillHeld, run };
  }

  it('commits while a removal statement is in progress, without waiting for it to end', async () => {
    const { consumerId, outcome, removalStillHeld, run } = await commitBesideHeldRemoval('');
    expect(outcome.error).toBeNull();
    expect(outcome.result).toMatchObject({ kind: 'committed', applied: 2, duplicates: 6 });
    expect(removalStillHeld).toBe(true);
    // The cancelled statement was retried in a narrower window and the run went on to the floor.
    expect(run.error).toBeNull();
    expect(await receiptPositions(consumerId)).toEqual([16, 16]);
    expect((await dumpState(db.pool, consumerId)).executions).toHaveLength(7);
  });

  it('a removal that also held the consumer checkpoint row would fail the commit (what the test above catches)', async () => {
    const { outcome, removalStillHeld } = await commitBesideHeldRemoval('PERFORM 1 FROM checkpoints FOR UPDATE;');
    expect(removalStillHeld).toBe(true);
    expect(outcome.result).toBeNull();
    expect(String(outcome.error)).toMatch(/55P03|lock timeout/);
  });
});

async function backendsWaiting(condition: string): Promise<number> {
  const res = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND ${condition}`,
  );
  return res.rows[0]?.n ?? 0;
}
