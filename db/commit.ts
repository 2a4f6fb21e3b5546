// commitCheckpoint: one transaction in three steps (DESIGN.md "The commit: read, decide, write").
//   read   — fence on the checkpoint row (FOR UPDATE: every mutation of a consumer serialises here), then one
//            query for the receipts/quarantine of the plan's eventIds and one for the executions of its entityIds;
//   decide — decideCommit(), pure;
//   write  — one statement of set-based data-modifying CTEs (unnest arrays, ON CONFLICT), ending with the
//            checkpoint row.
// BEGIN, lock, two reads, one write, COMMIT: six round trips whatever the size of the checkpoint. Checkpoints whose
// events are all new skip all of it: one fenced statement proves them new and writes them (commit-fast.ts).
import type pg from 'pg';
import {
  decideCommit,
  validatePlanAgainstSaved,
  validatePlanShape,
  type CommitWrites,
  type ExecutionState,
  type ExistingQuarantine,
  type ExistingReceipt,
  type ExistingRows,
  type QuarantineWrite,
} from '../domain/decide.js';
import { InvalidPlan } from '../domain/errors.js';
import { commitHeld, type CommitConflict, type CommitHeld } from '../domain/outcomes.js';
import type { CheckpointPlan, StagedEvent } from '../protocol/types.js';
import type { OuterJoined, RawRow } from './rows.js';
import type { eventReceipts, executions as executionsTable, quarantine as quarantineTable } from './schema.js';
import { fastCommit } from './commit-fast.js';
import { StorageFailure } from './errors.js';
import { lockCheckpoint } from './state.js';
import { inTransaction } from './transaction.js';
import { unchangedCommit } from './unchanged-checkpoint.js';

export interface CommitResult {
  version: number;
  position: number;
  applied: number;
  duplicates: number;
  noEffect: number;
  quarantined: number;
  qualityUpdated: number;
  outboxed: number;
}

/** The fence of a stream consumer's commit: its lease epoch and checkpoint version. */
export interface CheckpointFence {
  leaseEpoch: number;
  version: number;
}

/** The lease epoch or version moved: another attempt owns the consumer. Nothing written; never overwrite. */
export interface CheckpointFenced {
  kind: 'fenced';
  expected: CheckpointFence;
  /** null: the consumer has no checkpoint row. */
  actual: CheckpointFence | null;
}

export type CheckpointOutcome = ({ kind: 'committed' } & CommitResult) | CheckpointFenced | CommitConflict | CommitHeld;

export function describeFenced(consumerId: string, fenced: CheckpointFenced): string {
  const { expected, actual } = fenced;
  return (
    `commit fenced for consumer ${consumerId}: expected lease ${expected.leaseEpoch} version ${expected.version}, ` +
    (actual ? `found lease ${actual.leaseEpoch} version ${actual.version}` : 'consumer has no checkpoint row')
  );
}

/**
 * Commits one checkpoint plan atomically and says what happened: committed; fenced (another attempt owns the
 * consumer); conflict (same eventId, different content); held_quarantine (events the reducer cannot apply were
 * recorded as held; the checkpoint did not move). A plan that names the saved checkpoint and changes nothing is
 * committed without a write (the version stays). Throws InvalidPlan (nothing written) and StorageFailure.
 * A plan whose events are all new commits in one statement (commit-fast.ts); any other takes the exact path.
 */
export async function commitCheckpoint(
  pool: pg.Pool,
  plan: CheckpointPlan,
  /** Test cut point: runs with the checkpoint row locked and the fence checked, before anything is written. */
  whileLocked?: () => void | Promise<void>,
): Promise<CheckpointOutcome> {
  validatePlanShape(plan);
  if (whileLocked === undefined) {
    const fast = await fastCommit(pool, [plan]);
    if (fast !== null) return { kind: 'committed', ...fast[0]! };
  }
  return inTransaction(pool, 'commitCheckpoint', plan.consumerId, (client) => commitLocked(client, plan, whileLocked));
}

/**
 * Commits consecutive checkpoint plans of one session and generation (a consumer that fell behind) together:
 * one transaction, one WAL flush, ACKs in order afterwards (PROTOCOL.md §5, group commit). plans[0].fence is
 * the fence; each later plan is fenced on the version the one before it commits (their own fences are ignored).
 * Returns one outcome per plan, in order, up to and including the first that did not commit: when a plan is
 * refused the group is rolled back and committed one plan at a time, so everything before it is kept and the
 * stop lands exactly there. Throws like commitCheckpoint; a throw may follow commits of earlier plans (the
 * caller resumes from the database's committed state, as after any failed commit).
 */
export async function commitCheckpoints(pool: pg.Pool, plans: readonly CheckpointPlan[]): Promise<CheckpointOutcome[]> {
  if (plans.length === 0) return [];
  for (const plan of plans) validatePlanShape(plan);
  const fast = await fastCommit(pool, plans);
  if (fast !== null) return fast.map((result) => ({ kind: 'committed', ...result }));
  const grouped = await inTransaction(pool, 'commitCheckpoint', plans[0]!.consumerId, async (client) => {
    const outcomes: CheckpointOutcome[] = [];
    let fence = plans[0]!.fence;
    for (const plan of plans) {
      const later = outcomes.length > 0;
      const outcome = await commitLocked(client, { ...plan, fence }).catch((error: unknown) => {
        throw later && error instanceof InvalidPlan ? new GroupRefused() : error;
      });
      outcomes.push(outcome);
      if (outcome.kind !== 'committed') {
        // Undo the whole group (the held records too): the one-at-a-time pass below redoes it exactly.
        if (later) throw new GroupRefused();
        return outcomes;
      }
      fence = { leaseEpoch: fence.leaseEpoch, version: outcome.version };
    }
    return outcomes;
  }).catch((error: unknown) => {
    // inTransaction rolled back and wrapped it
    if (error instanceof StorageFailure && error.cause instanceof GroupRefused) return null;
    throw error;
  });
  if (grouped !== null) return grouped;
  const outcomes: CheckpointOutcome[] = [];
  let fence = plans[0]!.fence;
  for (const plan of plans) {
    const outcome = await commitCheckpoint(pool, { ...plan, fence });
    outcomes.push(outcome);
    if (outcome.kind !== 'committed') break;
    fence = { leaseEpoch: fence.leaseEpoch, version: outcome.version };
  }
  return outcomes;
}

/** A plan after the first of a group was refused: the group transaction rolls back. */
class GroupRefused extends Error {
  constructor() {
    super('a plan after the first of the group was refused');
  }
}

/** The exact path, inside the caller's transaction: fence under the row lock, read, decide, write. */
async function commitLocked(
  client: pg.PoolClient,
  plan: CheckpointPlan,
  whileLocked?: () => void | Promise<void>,
): Promise<CheckpointOutcome> {
  const saved = await lockCheckpoint(client, plan.consumerId);
  if (!saved || saved.leaseEpoch !== plan.fence.leaseEpoch || saved.version !== plan.fence.version) {
    const actual = saved ? { leaseEpoch: saved.leaseEpoch, version: saved.version } : null;
    return { kind: 'fenced', expected: plan.fence, actual };
  }
  validatePlanAgainstSaved(plan, saved);
  await whileLocked?.();
  const unchanged = await unchangedCommit(client, plan, saved);
  if (unchanged) return { kind: 'committed', ...unchanged };

  const existing = await readExisting(client, plan.consumerId, plan.events);
  const decision = decideCommit(plan, existing);
  switch (decision.kind) {
    case 'conflict':
      return decision;
    case 'held_quarantine':
      // Nothing of the checkpoint has been written (decide runs before any write), so committing only the
      // held records is the "roll back the checkpoint, record the quarantine" the protocol asks for — still
      // under this attempt's fence, so a zombie attempt cannot record anything either.
      await writeQuarantine(client, plan.consumerId, decision.held);
      return commitHeld(decision.held);
    case 'committed':
      return { kind: 'committed', ...(await writeCommit(client, plan, decision.writes)) };
  }
}

/** The read step: receipts, quarantine records and executions the events touch (also used by the page consumer). */
export async function readExisting(
  client: pg.PoolClient,
  consumerId: string,
  events: readonly StagedEvent[],
): Promise<ExistingRows> {
  const receipts = new Map<string, ExistingReceipt>();
  const quarantine = new Map<string, ExistingQuarantine>();
  const executions = new Map<string, ExecutionState>();
  if (events.length === 0) return { receipts, quarantine, executions };

  // Both reads probe the primary key once per id: LATERAL … LIMIT 1 cannot be flattened into a join, so the
  // planner cannot pick a hash join over all of the consumer's rows — which it does whenever its statistics lag
  // behind a growing table, making every commit O(table) instead of O(checkpoint).
  const eventIds = [...new Set(events.map((e) => e.eventId))];
  // Receipts and quarantine records in one query: both are keyed by eventId and both decide the event's fate.
  // Their position and ordinal come along: a legacy content hash is compared at the position it was saved at.
  const byEvent = await client.query<
    Pick<RawRow<typeof eventReceipts>, 'event_id'> &
      OuterJoined<{
        receipt_hash: RawRow<typeof eventReceipts>['content_hash'];
        receipt_position: RawRow<typeof eventReceipts>['position'];
        receipt_ordinal: RawRow<typeof eventReceipts>['ordinal'];
        outcome: RawRow<typeof eventReceipts>['outcome'];
        quarantine_hash: RawRow<typeof quarantineTable>['content_hash'];
        quarantine_position: RawRow<typeof quarantineTable>['position'];
        quarantine_ordinal: RawRow<typeof quarantineTable>['ordinal'];
        disposition: RawRow<typeof quarantineTable>['disposition'];
      }>
  >({
    name: 'whalehunt_commit_read_events',
    text: `SELECT ids.event_id, r.content_hash AS receipt_hash, r.position AS receipt_position, r.ordinal AS receipt_ordinal,
                  r.outcome, q.content_hash AS quarantine_hash, q.position AS quarantine_position,
                  q.ordinal AS quarantine_ordinal, q.disposition
             FROM unnest($2::text[]) AS ids(event_id)
             LEFT JOIN LATERAL (SELECT content_hash, position, ordinal, outcome FROM event_receipts
                                 WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) r ON true
             LEFT JOIN LATERAL (SELECT content_hash, position, ordinal, disposition FROM quarantine
                                 WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) q ON true
            WHERE r.content_hash IS NOT NULL OR q.content_hash IS NOT NULL`,
    values: [consumerId, eventIds],
  });
  for (const row of byEvent.rows) {
    if (row.receipt_hash !== null && row.outcome !== null) {
      receipts.set(row.event_id, {
        contentHash: row.receipt_hash,
        position: Number(row.receipt_position),
        ordinal: row.receipt_ordinal!,
        outcome: row.outcome,
      });
    }
    if (row.quarantine_hash !== null && row.disposition !== null) {
      quarantine.set(row.event_id, {
        contentHash: row.quarantine_hash,
        position: Number(row.quarantine_position),
        ordinal: row.quarantine_ordinal!,
        disposition: row.disposition,
      });
    }
  }

  const entityIds = [...new Set(events.map((e) => e.entityId))];
  const byEntity = await client.query<Omit<RawRow<typeof executionsTable>, 'consumer_id' | 'updated_at'>>({
    name: 'whalehunt_commit_read_executions',
    text: `SELECT e.entity_id, e.revision, e.market, e.asset, e.side, e.price::text, e.size::text, e.notional::text, e.wallet,
                  e.tx_hash, e.first_position, e.last_position, e.event_id
             FROM unnest($2::text[]) AS ids(entity_id)
             CROSS JOIN LATERAL (SELECT * FROM executions
                                  WHERE consumer_id = $1 AND entity_id = ids.entity_id LIMIT 1) e`,
    values: [consumerId, entityIds],
  });
  for (const row of byEntity.rows) {
    executions.set(row.entity_id, {
      entityId: row.entity_id,
      revision: row.revision,
      market: row.market,
      asset: row.asset,
      side: row.side,
      price: row.price,
      size: row.size,
      notional: row.notional,
      wallet: row.wallet,
      txHash: row.tx_hash,
      firstPosition: Number(row.first_position),
      lastPosition: Number(row.last_position),
      eventId: row.event_id,
    });
  }
  return { receipts, quarantine, executions };
}

/** Held records, or terminal ones. A held record seen again stays held; a retried one is held again. */
export async function writeQuarantine(
  client: pg.PoolClient,
  consumerId: string,
  records: QuarantineWrite[],
): Promise<void> {
  if (records.length === 0) return;
  await client.query(
    `INSERT INTO quarantine (consumer_id, event_id, entity_id, kind, position, ordinal, content_hash, reason, disposition)
     SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[], $7::text[], $8::text[], $9::text[])
     ON CONFLICT (consumer_id, event_id) DO UPDATE
        SET disposition = EXCLUDED.disposition, reason = EXCLUDED.reason, updated_at = now()
      -- never demote a terminal record (an operator's decision) back to held
      WHERE quarantine.disposition <> 'terminal'`,
    [
      consumerId,
      records.map((r) => r.eventId),
      records.map((r) => r.entityId),
      records.map((r) => r.kind),
      records.map((r) => r.position),
      records.map((r) => r.ordinal),
      records.map((r) => r.contentHash),
      records.map((r) => r.reason),
      records.map((r) => r.disposition),
    ],
  );
}

/**
 * Every write of the commit in ONE statement of data-modifying CTEs: one round trip whatever the plan holds
 * (an empty array unnests to no rows, so an unused part is a no-op). Postgres runs each data-modifying CTE
 * exactly once; the parts touch disjoint rows (decide() emits one row per entity, market, scope and event), so
 * none needs to see another's effect within the statement.
 *
 * EFFECT_WRITE_CTES are the effects of decide()'s writes ($1 consumer, $2-$49 from effectWriteValues); each
 * source appends the CTEs of its own progress row (parameters from $50) and a SELECT that may read `quality` and
 * `outboxed`: the stream its binding and checkpoint, the page consumer its applied position.
 */
export const EFFECT_WRITE_CTES = `
WITH receipts AS (
  -- dedup receipts: the durable outcome of every new event
  INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
  SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::int[], $6::text[])
),
executions_written AS (
  -- the checkpoint row lock serialises this consumer's commits, so the state decide() computed from the rows
  -- read under it is the state to store: a plain overwrite, no read-modify-write in SQL
  INSERT INTO executions (consumer_id, entity_id, revision, market, asset, side, price, size, notional, wallet, tx_hash,
                          first_position, last_position, event_id)
  SELECT $1, * FROM unnest($7::text[], $8::int[], $9::text[], $10::text[], $11::text[], $12::numeric[], $13::numeric[],
                           $14::numeric[], $15::text[], $16::text[], $17::bigint[], $18::bigint[], $19::text[])
  ON CONFLICT (consumer_id, entity_id) DO UPDATE
     SET revision = EXCLUDED.revision, market = EXCLUDED.market, asset = EXCLUDED.asset, side = EXCLUDED.side,
         price = EXCLUDED.price, size = EXCLUDED.size, notional = EXCLUDED.notional, wallet = EXCLUDED.wallet,
         tx_hash = EXCLUDED.tx_hash, last_position = EXCLUDED.last_position, event_id = EXCLUDED.event_id,
         updated_at = now()
),
revisions AS (
  -- superseded revisions (the state each correction replaced)
  INSERT INTO execution_revisions (consumer_id, entity_id, revision, event_id, position, market, asset, side, price, size,
                                   notional, wallet, tx_hash)
  SELECT $1, * FROM unnest($20::text[], $21::int[], $22::text[], $23::bigint[], $24::text[], $25::text[], $26::text[],
                           $27::numeric[], $28::numeric[], $29::numeric[], $30::text[], $31::text[])
),
volumes AS (
  -- deltas added in SQL numeric: exact, whatever any other reader saw
  INSERT INTO market_volumes (consumer_id, market, volume, execution_count)
  SELECT $1, * FROM unnest($32::text[], $33::numeric[], $34::int[])
  ON CONFLICT (consumer_id, market) DO UPDATE
     SET volume = market_volumes.volume + EXCLUDED.volume,
         execution_count = market_volumes.execution_count + EXCLUDED.execution_count, updated_at = now()
),
terminal_quarantine AS (
  INSERT INTO quarantine (consumer_id, event_id, entity_id, kind, position, ordinal, content_hash, reason, disposition)
  SELECT $1, *, 'terminal' FROM unnest($35::text[], $36::text[], $37::text[], $38::bigint[], $39::int[], $40::text[], $41::text[])
  ON CONFLICT (consumer_id, event_id) DO UPDATE SET disposition = 'terminal', updated_at = now()
),
quality AS (
  -- older never overwrites newer: a notice at or below the saved last_position is a no-op
  INSERT INTO source_quality (consumer_id, scope, state, last_position, as_of)
  SELECT $1, scope, state, last_position, $45 FROM unnest($42::text[], $43::text[], $44::bigint[]) AS n(scope, state, last_position)
  ON CONFLICT (consumer_id, scope) DO UPDATE
     SET state = EXCLUDED.state, last_position = EXCLUDED.last_position, as_of = EXCLUDED.as_of, updated_at = now()
   WHERE source_quality.last_position < EXCLUDED.last_position
  RETURNING 1
),
outboxed AS (
  -- keyed by <action>:<eventId>: a replayed event never writes its action twice
  INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload)
  SELECT $1, * FROM unnest($46::text[], $47::text[], $48::text[], $49::jsonb[])
  ON CONFLICT (consumer_id, idempotency_key) DO NOTHING
  RETURNING 1
),
`;
export const EFFECT_PARAM_COUNT = 49;

const WRITE_COMMIT_SQL = `${EFFECT_WRITE_CTES}binding AS (
  INSERT INTO consumer_bindings (consumer_id, subscription_id, stream, history_id, filter, filter_hash, generation, mappings)
  VALUES ($1, $50, $51, $52, $53::jsonb, $54, $55, $56::jsonb)
  ON CONFLICT (consumer_id) DO UPDATE
     SET subscription_id = EXCLUDED.subscription_id, stream = EXCLUDED.stream, history_id = EXCLUDED.history_id,
         filter = EXCLUDED.filter, filter_hash = EXCLUDED.filter_hash, generation = EXCLUDED.generation,
         mappings = EXCLUDED.mappings, updated_at = now()
   -- skip the write (and its dead tuple) when nothing changed, the common case
   WHERE (consumer_bindings.subscription_id, consumer_bindings.stream, consumer_bindings.history_id, consumer_bindings.filter,
          consumer_bindings.filter_hash, consumer_bindings.generation, consumer_bindings.mappings)
         IS DISTINCT FROM
         (EXCLUDED.subscription_id, EXCLUDED.stream, EXCLUDED.history_id, EXCLUDED.filter, EXCLUDED.filter_hash,
          EXCLUDED.generation, EXCLUDED.mappings)
),
checkpoint AS (
  -- the whole token, never truncated; version + 1 is the compare-and-swap the next commit is fenced on
  UPDATE checkpoints
     SET position = $57, token = $58, generation = $59, cut_position = $60, cut_reached = $61,
         version = version + 1, pending_start = NULL, updated_at = now()
   WHERE consumer_id = $1
  RETURNING version
)
SELECT (SELECT version FROM checkpoint) AS version,
       (SELECT count(*) FROM quality)::int AS quality_updated,
       (SELECT count(*) FROM outboxed)::int AS outboxed`;

/**
 * $1-$49 of EFFECT_WRITE_CTES: the consumer and decide()'s writes; `asOf` is the position saved with quality notices.
 */
export function effectWriteValues(consumerId: string, writes: CommitWrites, asOf: number): unknown[] {
  const { receipts: r, executions: e, revisions: v, marketDeltas: m, quarantine: q, quality: n, outbox: o } = writes;
  return [
    consumerId,
    // $2-$6 receipts
    r.map((x) => x.eventId),
    r.map((x) => x.contentHash),
    r.map((x) => x.position),
    r.map((x) => x.ordinal),
    r.map((x) => x.outcome),
    // $7-$19 executions
    e.map((x) => x.entityId),
    e.map((x) => x.revision),
    e.map((x) => x.market),
    e.map((x) => x.asset),
    e.map((x) => x.side),
    e.map((x) => x.price),
    e.map((x) => x.size),
    e.map((x) => x.notional),
    e.map((x) => x.wallet),
    e.map((x) => x.txHash),
    e.map((x) => x.firstPosition),
    e.map((x) => x.lastPosition),
    e.map((x) => x.eventId),
    // $20-$31 superseded revisions
    v.map((x) => x.entityId),
    v.map((x) => x.revision),
    v.map((x) => x.eventId),
    v.map((x) => x.position),
    v.map((x) => x.market),
    v.map((x) => x.asset),
    v.map((x) => x.side),
    v.map((x) => x.price),
    v.map((x) => x.size),
    v.map((x) => x.notional),
    v.map((x) => x.wallet),
    v.map((x) => x.txHash),
    // $32-$34 market deltas
    m.map((x) => x.market),
    m.map((x) => x.volume),
    m.map((x) => x.count),
    // $35-$41 terminal quarantine
    q.map((x) => x.eventId),
    q.map((x) => x.entityId),
    q.map((x) => x.kind),
    q.map((x) => x.position),
    q.map((x) => x.ordinal),
    q.map((x) => x.contentHash),
    q.map((x) => x.reason),
    // $42-$45 quality
    n.map((x) => x.scope),
    n.map((x) => x.state),
    n.map((x) => x.position),
    asOf,
    // $46-$49 outbox
    o.map((x) => x.idempotencyKey),
    o.map((x) => x.eventId),
    o.map((x) => x.action),
    o.map((x) => JSON.stringify(x.payload)),
  ];
}

async function writeCommit(client: pg.PoolClient, plan: CheckpointPlan, writes: CommitWrites): Promise<CommitResult> {
  const { binding, checkpoint } = plan;
  // A named statement: parsed once per connection instead of on every commit (the statement is large).
  const res = await client.query<{ version: number | null; quality_updated: number; outboxed: number }>({
    name: 'whalehunt_commit_write',
    text: WRITE_COMMIT_SQL,
    values: [
      ...effectWriteValues(plan.consumerId, writes, checkpoint.position),
      // $50-$56 binding
      binding.subscriptionId,
      binding.stream,
      binding.historyId,
      JSON.stringify(binding.filter),
      binding.filterHash,
      binding.generation,
      JSON.stringify(binding.mappings),
      // $57-$61 checkpoint
      checkpoint.position,
      checkpoint.token,
      checkpoint.generation,
      checkpoint.cutPosition,
      checkpoint.cutReached,
    ],
  });
  const row = res.rows[0]!;
  return {
    version: row.version!,
    position: checkpoint.position,
    ...writes.counts,
    qualityUpdated: row.quality_updated,
    outboxed: row.outboxed,
  };
}
