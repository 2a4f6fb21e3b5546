// The optimistic commit: ONE fenced statement, outside any explicit transaction (a single statement is atomic), for
// checkpoints whose events are all new to the database — the common case of a stream moving forward. The client
// decides as if the database held no receipt or quarantine record for the plans' eventIds and, of their entities,
// only the executions the run knows (RecentExecutions: rows it wrote or read at the version the fence names);
// the statement proves that assumption under the fence (no receipt or quarantine record for any eventId, no
// execution for any entity the run does not know) and writes only if it holds, with plain INSERTs for the rows it
// proved new. When it does not hold (a duplicate, a correction of an entity the run does not know, a quarantine
// record, a moved fence, a plan the saved state refuses), nothing is written and the caller runs the
// read-decide-write path, which then answers exactly.
//
// Why the proof holds although its reads use the statement's snapshot, taken before the checkpoint row is locked:
// every writer of receipts and executions bumps the checkpoint version (or the lease epoch) under that lock, so
// the fence comparing the LATEST row with what this attempt holds fails if any of them committed after the plan
// was made — and anything committed before is in the snapshot. The same fence keeps the known executions exact.
//
// Every event of such a run has a receipt (an in-run duplicate shares the first one's) and its entity an execution,
// so the receipts and executions written are also the ids the proof probes.
//
// Several consecutive plans of one session (a group commit) are folded the same way, in order, each seeing the
// previous ones' effects, and committed by the same one statement: one round trip and one WAL flush for all.
import type pg from 'pg';
import type { ExecutionState, ReceiptWrite } from '../domain/decide.js';
import type { CheckpointPlan } from '../protocol/types.js';
import type { CommitResult } from './commit.js';
import { foldPlans } from './commit-fold.js';
import { numberArray, textArray } from './pg-arrays.js';
import { toStorageFailure } from './transaction.js';

/**
 * Only trades, and corrections of entities traded earlier in the same run or known to it, can be new to the
 * database: for any other run, folding it first would be wasted work.
 */
function mayBeAllNew(plans: readonly CheckpointPlan[], known: ReadonlyMap<string, ExecutionState>): boolean {
  const traded = new Set<string>();
  for (const plan of plans) {
    for (const event of plan.events) {
      if (event.kind === 'trade') traded.add(event.entityId);
      else if (event.kind !== 'correction' || !(traded.has(event.entityId) || known.has(event.entityId))) return false;
    }
  }
  return true;
}

/** The known rows of the run's entities: what the fold starts from besides what the proof shows absent. */
function knownRowsOf(
  plans: readonly CheckpointPlan[],
  known: ReadonlyMap<string, ExecutionState>,
): Map<string, ExecutionState> {
  const rows = new Map<string, ExecutionState>();
  if (known.size === 0) return rows;
  for (const plan of plans) {
    for (const event of plan.events) {
      const row = known.get(event.entityId);
      if (row !== undefined) rows.set(event.entityId, row);
    }
  }
  return rows;
}

/**
 * The executions a commit writes, split by whether the row exists ($saved[i]): plain INSERTs for the rows proven
 * absent (an upsert writes a speculative insertion too), an overwrite for the others. The checkpoint row lock
 * serialises this consumer's commits, so the state decide() computed is the state to store: no read-modify-write
 * in SQL. `first` is the parameter number of the 13 execution arrays, `saved` of the boolean array.
 */
export function executionWriteCtes(first: number, saved: number, guard = ''): string {
  const p = (k: number) => `$${first + k}`;
  const rows = `unnest(${p(0)}::text[], ${p(1)}::int[], ${p(2)}::text[], ${p(3)}::text[], ${p(4)}::text[],
                ${p(5)}::numeric[], ${p(6)}::numeric[], ${p(7)}::numeric[], ${p(8)}::text[], ${p(9)}::text[],
                ${p(10)}::bigint[], ${p(11)}::bigint[], ${p(12)}::text[], $${saved}::boolean[])
         AS x(entity_id, revision, market, asset, side, price, size, notional, wallet, tx_hash, first_position,
              last_position, event_id, saved)`;
  const insert = `INSERT INTO executions (consumer_id, entity_id, revision, market, asset, side, price, size, notional, wallet,
                          tx_hash, first_position, last_position, event_id)
  SELECT $1, entity_id, revision, market, asset, side, price, size, notional, wallet, tx_hash, first_position,
         last_position, event_id
    FROM ${rows}`;
  const and = guard === '' ? 'WHERE' : `${guard} AND`;
  return `executions_inserted AS (
  ${insert}
   ${and} NOT x.saved
),
executions_updated AS (
  -- an upsert of a row that exists goes straight to its update; unlike UPDATE … FROM, whose join a cached plan may
  -- turn into a scan of all the consumer's executions, it probes the primary key once per row
  ${insert}
   ${and} x.saved
  ON CONFLICT (consumer_id, entity_id) DO UPDATE
     SET revision = EXCLUDED.revision, market = EXCLUDED.market, asset = EXCLUDED.asset, side = EXCLUDED.side,
         price = EXCLUDED.price, size = EXCLUDED.size, notional = EXCLUDED.notional, wallet = EXCLUDED.wallet,
         tx_hash = EXCLUDED.tx_hash, last_position = EXCLUDED.last_position, event_id = EXCLUDED.event_id,
         updated_at = now()
),`;
}

// $1 consumer, $2 lease epoch, $3 version, $4 version increment, $5 every position of the run must be above the
// saved one, $6 generation, $7 the first plan is a rebind, $8-$12 receipts, $13-$25 executions (arrays: Postgres
// reads a thousand-row array several times faster than the same rows as json), $26-$29 the short row sets as json
// (superseded revisions, market deltas, outbox, quality: one parameter each), $30-$36 binding, $37-$41 checkpoint,
// $42 which executions the run knows. The receipts name every eventId of the run and the executions every entityId.
const FAST_COMMIT_SQL = `
WITH clash AS (
  -- LATERAL … LIMIT 1: one primary-key probe per id (readExisting says why a join would not do)
  (SELECT 1 FROM unnest($8::text[]) AS ids(event_id)
     CROSS JOIN LATERAL (SELECT 1 FROM event_receipts WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) r
   LIMIT 1)
  UNION ALL
  -- most consumers have no quarantine record at all: one probe of the consumer's key range spares one per event
  (SELECT 1 FROM unnest($8::text[]) AS ids(event_id)
     CROSS JOIN LATERAL (SELECT 1 FROM quarantine WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) q
   WHERE EXISTS (SELECT 1 FROM quarantine WHERE consumer_id = $1)
   LIMIT 1)
  UNION ALL
  -- the executions the run does not know (RecentExecutions holds the others as they are at the fence)
  (SELECT 1 FROM unnest($13::text[], $42::boolean[]) AS ids(entity_id, saved)
     CROSS JOIN LATERAL (SELECT 1 FROM executions WHERE consumer_id = $1 AND entity_id = ids.entity_id LIMIT 1) e
   WHERE NOT ids.saved
   LIMIT 1)
),
checkpoint AS (
  -- the fence, validatePlanAgainstSaved's continuing case, and the proof that everything is new, in one WHERE
  UPDATE checkpoints
     SET position = $37, token = $38, generation = $39, cut_position = $40, cut_reached = $41,
         version = version + $4, pending_start = NULL, updated_at = now(), checkpoints_committed = checkpoints_committed + $4,
         events_applied = events_applied + (SELECT count(*) FROM unnest($12::text[]) AS r(outcome) WHERE outcome = 'applied')
   WHERE consumer_id = $1 AND lease_epoch = $2 AND version = $3
     AND NOT abandoned AND pending_start IS NULL AND position < $5
     AND (generation = $6 OR ($7 AND generation + 1 = $6))
     AND NOT EXISTS (SELECT 1 FROM clash)
  RETURNING version
),
receipts AS (
  INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
  SELECT $1, * FROM unnest($8::text[], $9::text[], $10::bigint[], $11::int[], $12::text[])
   WHERE EXISTS (SELECT 1 FROM checkpoint)
),
${executionWriteCtes(13, 42, 'WHERE EXISTS (SELECT 1 FROM checkpoint)')}
revisions AS (
  -- superseded revisions (the state each correction replaced)
  INSERT INTO execution_revisions (consumer_id, entity_id, revision, event_id, position, market, asset, side, price, size,
                                   notional, wallet, tx_hash)
  SELECT $1, v."entityId", v.revision, v."eventId", v.position, v.market, v.asset, v.side, v.price, v.size, v.notional,
         v.wallet, v."txHash"
    FROM json_to_recordset($26::json) AS v("entityId" text, revision int, "eventId" text, position bigint, market text,
                                           asset text, side text, price numeric, size numeric, notional numeric,
                                           wallet text, "txHash" text)
   WHERE EXISTS (SELECT 1 FROM checkpoint)
),
volumes AS (
  INSERT INTO market_volumes (consumer_id, market, volume, execution_count)
  SELECT $1, m.market, m.volume, m.count
    FROM json_to_recordset($27::json) AS m(market text, volume numeric, count int)
   WHERE EXISTS (SELECT 1 FROM checkpoint)
  ON CONFLICT (consumer_id, market) DO UPDATE
     SET volume = market_volumes.volume + EXCLUDED.volume,
         execution_count = market_volumes.execution_count + EXCLUDED.execution_count, updated_at = now()
),
outboxed AS (
  -- keyed by the eventId, which has no receipt yet: no action of it was ever written
  INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason)
  SELECT $1, o."idempotencyKey", o."eventId", o.action, o.payload,
         CASE WHEN o."suppressedReason" IS NULL THEN 'pending' ELSE 'suppressed' END, o."suppressedReason"
    FROM json_to_recordset($28::json) AS o("idempotencyKey" text, "eventId" text, action text, payload jsonb,
                                           "suppressedReason" text)
   WHERE EXISTS (SELECT 1 FROM checkpoint)
),
quality AS (
  INSERT INTO source_quality (consumer_id, scope, state, last_position, as_of)
  SELECT $1, n.scope, n.state, n.position, n."asOf"
    FROM json_to_recordset($29::json) AS n(scope text, state text, position bigint, "asOf" bigint)
   WHERE EXISTS (SELECT 1 FROM checkpoint)
  ON CONFLICT (consumer_id, scope) DO UPDATE
     SET state = EXCLUDED.state, last_position = EXCLUDED.last_position, as_of = EXCLUDED.as_of, updated_at = now()
   WHERE source_quality.last_position < EXCLUDED.last_position
  RETURNING scope
),
binding AS (
  INSERT INTO consumer_bindings (consumer_id, subscription_id, stream, history_id, filter, filter_hash, generation, mappings)
  SELECT $1, $30, $31, $32, $33::jsonb, $34, $35, $36::jsonb
   WHERE EXISTS (SELECT 1 FROM checkpoint)
  ON CONFLICT (consumer_id) DO UPDATE
     SET subscription_id = EXCLUDED.subscription_id, stream = EXCLUDED.stream, history_id = EXCLUDED.history_id,
         filter = EXCLUDED.filter, filter_hash = EXCLUDED.filter_hash, generation = EXCLUDED.generation,
         mappings = EXCLUDED.mappings, updated_at = now()
   WHERE (consumer_bindings.subscription_id, consumer_bindings.stream, consumer_bindings.history_id, consumer_bindings.filter,
          consumer_bindings.filter_hash, consumer_bindings.generation, consumer_bindings.mappings)
         IS DISTINCT FROM
         (EXCLUDED.subscription_id, EXCLUDED.stream, EXCLUDED.history_id, EXCLUDED.filter, EXCLUDED.filter_hash,
          EXCLUDED.generation, EXCLUDED.mappings)
)
SELECT (SELECT version FROM checkpoint) AS version, ARRAY(SELECT scope FROM quality) AS quality_scopes`;

/** What the one statement committed: one result per plan, and the executions it wrote (their new rows). */
export interface FastCommitted {
  results: CommitResult[];
  executions: ExecutionState[];
}

/**
 * Commits consecutive plans of one session as one statement when all their events are new, fenced on the first
 * plan's fence (each later plan continues the version the previous one reaches). `known`: the executions the run
 * knows at that fence (RecentExecutions.at). Returns null when nothing was written and the exact path must decide
 * (see the header).
 */
export async function fastCommit(
  pool: pg.Pool,
  plans: readonly CheckpointPlan[],
  known: ReadonlyMap<string, ExecutionState>,
): Promise<FastCommitted | null> {
  const first = plans[0];
  const last = plans.at(-1);
  if (first === undefined || last === undefined) return { results: [], executions: [] };
  if (!mayBeAllNew(plans, known)) return null;
  const saved = knownRowsOf(plans, known);
  const fold = foldPlans(plans, { receipts: new Map(), quarantine: new Map(), executions: saved });
  if (fold.stop !== null || fold.writes.quarantine.length > 0) return null;
  const { writes } = fold;
  // Every event is at or below its checkpoint and in journal order: the first event is the lowest position.
  const floor = first.events[0]?.position ?? first.checkpoint.position;
  let row: { version: number | null; quality_scopes: string[] };
  try {
    const res = await pool.query<{ version: number | null; quality_scopes: string[] }>({
      name: 'whalehunt_commit_fast',
      text: FAST_COMMIT_SQL,
      values: [
        first.consumerId,
        first.fence.leaseEpoch,
        first.fence.version,
        plans.length,
        floor,
        first.checkpoint.generation,
        first.startMode === 'rebind',
        ...receiptColumns(writes.receipts),
        ...executionColumns(writes.executions),
        JSON.stringify(writes.revisions),
        JSON.stringify(writes.marketDeltas),
        JSON.stringify(writes.outbox),
        JSON.stringify(writes.quality),
        ...checkpointColumns(last),
        savedColumn(writes.executions, saved),
      ],
    });
    row = res.rows[0]!;
  } catch (error) {
    throw toStorageFailure('commitCheckpoint', first.consumerId, error);
  }
  if (row.version === null) return null;
  const updated = new Set(row.quality_scopes);
  const startVersion = row.version - plans.length;
  const results = plans.map((plan, index) => ({
    version: startVersion + index + 1,
    position: plan.checkpoint.position,
    ...writes.counts[index]!,
    // In a group a scope counts once, for the plan whose notice was written.
    qualityUpdated: writes.quality.filter((q) => q.plan === index && updated.has(q.scope)).length,
    outboxed: writes.outboxed[index]!,
  }));
  return { results, executions: writes.executions };
}

/** Which of the executions written exist already, as the boolean array both commit statements take. */
export function savedColumn(executions: readonly ExecutionState[], saved: ReadonlyMap<string, unknown>): string {
  return `{${executions.map((x) => (saved.has(x.entityId) ? 't' : 'f')).join(',')}}`;
}

/** The run's last plan's binding (7 parameters) and checkpoint (5), the row both commit statements end with. */
export function checkpointColumns({ binding, checkpoint }: CheckpointPlan): unknown[] {
  return [
    binding.subscriptionId,
    binding.stream,
    binding.historyId,
    JSON.stringify(binding.filter),
    binding.filterHash,
    binding.generation,
    JSON.stringify(binding.mappings),
    checkpoint.position,
    checkpoint.token,
    checkpoint.generation,
    checkpoint.cutPosition,
    checkpoint.cutReached,
  ];
}

/** Receipt rows as the array parameters both commit statements take (event id, hash, position, ordinal, outcome). */
export function receiptColumns(r: readonly ReceiptWrite[]): string[] {
  return [
    textArray(r.map((x) => x.eventId)),
    textArray(r.map((x) => x.contentHash)),
    numberArray(r.map((x) => x.position)),
    numberArray(r.map((x) => x.ordinal)),
    textArray(r.map((x) => x.outcome)),
  ];
}

/** Execution rows as the thirteen array parameters both commit statements take, in the tables' column order. */
export function executionColumns(e: readonly ExecutionState[]): string[] {
  return [
    textArray(e.map((x) => x.entityId)),
    numberArray(e.map((x) => x.revision)),
    textArray(e.map((x) => x.market)),
    textArray(e.map((x) => x.asset)),
    textArray(e.map((x) => x.side)),
    numberArray(e.map((x) => x.price)),
    numberArray(e.map((x) => x.size)),
    numberArray(e.map((x) => x.notional)),
    textArray(e.map((x) => x.wallet)),
    textArray(e.map((x) => x.txHash)),
    numberArray(e.map((x) => x.firstPosition)),
    numberArray(e.map((x) => x.lastPosition)),
    textArray(e.map((x) => x.eventId)),
  ];
}
