// The optimistic commit: ONE fenced statement, outside any explicit transaction (a single statement is atomic), for
// checkpoints whose events are all new to the database — the common case of a stream moving forward. The client
// decides as if the database held nothing the plans touch; the statement proves that assumption under the fence
// (no receipt or quarantine record for any eventId, no execution for any entityId) and writes only if it holds,
// with plain INSERTs for the rows it proved new. When it does not hold (a duplicate, a correction of an earlier
// entity, a quarantine record, a moved fence, a plan the saved state refuses), nothing is written and the caller
// runs the read-decide-write path, which then answers exactly.
//
// Why the proof holds although its reads use the statement's snapshot, taken before the checkpoint row is locked:
// every writer of receipts and executions bumps the checkpoint version (or the lease epoch) under that lock, so
// the fence comparing the LATEST row with what this attempt holds fails if any of them committed after the plan
// was made — and anything committed before is in the snapshot.
//
// Every event of such a run has a receipt (an in-run duplicate shares the first one's) and its entity an execution,
// so the receipts and executions written are also the ids the proof probes.
//
// Several consecutive plans of one session (a group commit) are folded the same way, in order, each seeing the
// previous ones' effects, and committed by the same one statement: one round trip and one WAL flush for all.
import type pg from 'pg';
import {
  decideCommit,
  newestNoticePerScope,
  validatePlanAgainstSaved,
  type CommitWrites,
  type ExecutionState,
  type ExistingReceipt,
  type MarketDelta,
  type OutboxWrite,
  type ReceiptWrite,
  type RevisionWrite,
} from '../domain/decide.js';
import { InvalidPlan } from '../domain/errors.js';
import { addDecimal, formatDecimal, parseDecimal, type Decimal } from '../protocol/decimal.js';
import type { CheckpointPlan } from '../protocol/types.js';
import type { CommitResult } from './commit.js';
import { numberArray, textArray } from './pg-arrays.js';
import { toStorageFailure } from './transaction.js';

/** A quality notice as written: the newest one per scope over the group, with the plan that carried it. */
interface QualityRow {
  scope: string;
  state: string;
  position: number;
  /** the position of the checkpoint that carried it (source_quality.as_of) */
  asOf: number;
  plan: number;
}

/** The writes of a run of plans folded over an empty database, or null when the assumption cannot even be made. */
interface OptimisticWrites {
  receipts: ReceiptWrite[];
  executions: ExecutionState[];
  revisions: RevisionWrite[];
  marketDeltas: MarketDelta[];
  outbox: OutboxWrite[];
  quality: QualityRow[];
  /** per plan */
  counts: CommitWrites['counts'][];
  /** per plan */
  outboxed: number[];
}

/**
 * Folds the plans, in order, through decideCommit over "nothing saved yet" plus the previous plans' own writes.
 * Null when a plan would not simply commit on that assumption (a correction of an unknown entity, a conflict, a
 * quarantine) or when a later plan does not continue the previous one: the exact path decides those.
 */
function foldOptimistic(plans: readonly CheckpointPlan[]): OptimisticWrites | null {
  const receipts = new Map<string, ExistingReceipt>();
  const executions = new Map<string, ExecutionState>();
  const existing = { receipts, quarantine: new Map(), executions };
  const out: OptimisticWrites = {
    receipts: [],
    executions: [],
    revisions: [],
    marketDeltas: [],
    outbox: [],
    quality: [],
    counts: [],
    outboxed: [],
  };
  const deltas = new Map<string, { volume: Decimal; count: number }>();
  const quality = new Map<string, QualityRow>();
  let previous: CheckpointPlan | null = null;
  for (const [index, plan] of plans.entries()) {
    if (previous !== null && !continues(previous, plan)) return null;
    const decision = decideCommit(plan, existing);
    if (decision.kind !== 'committed' || decision.writes.quarantine.length > 0) return null;
    const w = decision.writes;
    for (const r of w.receipts) {
      receipts.set(r.eventId, {
        contentHash: r.contentHash,
        position: r.position,
        ordinal: r.ordinal,
        outcome: r.outcome,
      });
      out.receipts.push(r);
    }
    for (const e of w.executions) executions.set(e.entityId, e);
    out.revisions.push(...w.revisions);
    out.outbox.push(...w.outbox);
    for (const d of w.marketDeltas) {
      const entry = deltas.get(d.market) ?? { volume: { units: 0n, scale: 0 }, count: 0 };
      entry.volume = addDecimal(entry.volume, parseDecimal(d.volume));
      entry.count += d.count;
      deltas.set(d.market, entry);
    }
    // The rule the database applies commit after commit: a notice replaces the saved one only if newer.
    for (const n of newestNoticePerScope(w.quality)) {
      const saved = quality.get(n.scope);
      if (saved === undefined || saved.position < n.position) {
        quality.set(n.scope, { ...n, asOf: plan.checkpoint.position, plan: index });
      }
    }
    out.counts.push(w.counts);
    out.outboxed.push(w.outbox.length);
    previous = plan;
  }
  out.executions = [...executions.values()];
  // A market some plan touched keeps its row even when the run's deltas cancel out, as one commit at a time would.
  for (const [market, d] of deltas) {
    out.marketDeltas.push({ market, volume: formatDecimal(d.volume), count: d.count });
  }
  out.quality = [...quality.values()];
  return out;
}

/** A later plan of a group continues the previous one exactly as the saved state would after its commit. */
function continues(previous: CheckpointPlan, plan: CheckpointPlan): boolean {
  const { checkpoint } = previous;
  // The same position again with nothing new is the unchanged-checkpoint no-op: the exact path handles it.
  if (plan.checkpoint.position === checkpoint.position && plan.events.length === 0) return false;
  if (plan.consumerId !== previous.consumerId) return false;
  try {
    validatePlanAgainstSaved(plan, {
      position: checkpoint.position,
      generation: checkpoint.generation,
      pendingStart: null,
      abandoned: false,
    });
    return true;
  } catch (error) {
    if (error instanceof InvalidPlan) return false;
    throw error;
  }
}

// $1 consumer, $2 lease epoch, $3 version, $4 version increment, $5 every position of the run must be above the
// saved one, $6 generation, $7 the first plan is a rebind, $8-$12 receipts, $13-$25 executions (arrays: Postgres
// reads a thousand-row array several times faster than the same rows as json), $26-$29 the short row sets as json
// (revisions of entities traded in the same run, market deltas, outbox, quality: one parameter each),
// $30-$36 binding, $37-$41 checkpoint. The receipts name every eventId of the run and the executions every entityId.
const FAST_COMMIT_SQL = `
WITH clash AS (
  -- LATERAL … LIMIT 1: one primary-key probe per id (readExisting says why a join would not do)
  (SELECT 1 FROM unnest($8::text[]) AS ids(event_id)
     CROSS JOIN LATERAL (SELECT 1 FROM event_receipts WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) r
   LIMIT 1)
  UNION ALL
  (SELECT 1 FROM unnest($8::text[]) AS ids(event_id)
     CROSS JOIN LATERAL (SELECT 1 FROM quarantine WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) q
   LIMIT 1)
  UNION ALL
  (SELECT 1 FROM unnest($13::text[]) AS ids(entity_id)
     CROSS JOIN LATERAL (SELECT 1 FROM executions WHERE consumer_id = $1 AND entity_id = ids.entity_id LIMIT 1) e
   LIMIT 1)
),
checkpoint AS (
  -- the fence, validatePlanAgainstSaved's continuing case, and the proof that everything is new, in one WHERE
  UPDATE checkpoints
     SET position = $37, token = $38, generation = $39, cut_position = $40, cut_reached = $41,
         version = version + $4, pending_start = NULL, updated_at = now()
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
executions_written AS (
  INSERT INTO executions (consumer_id, entity_id, revision, market, asset, side, price, size, notional, wallet, tx_hash,
                          first_position, last_position, event_id)
  SELECT $1, * FROM unnest($13::text[], $14::int[], $15::text[], $16::text[], $17::text[], $18::numeric[],
                           $19::numeric[], $20::numeric[], $21::text[], $22::text[], $23::bigint[], $24::bigint[],
                           $25::text[])
   WHERE EXISTS (SELECT 1 FROM checkpoint)
),
revisions AS (
  -- corrections of entities first traded within the same run
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
  INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload)
  SELECT $1, o."idempotencyKey", o."eventId", o.action, o.payload
    FROM json_to_recordset($28::json) AS o("idempotencyKey" text, "eventId" text, action text, payload jsonb)
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

/**
 * Commits consecutive plans of one session as one statement when all their events are new, fenced on the first
 * plan's fence (each later plan continues the version the previous one reaches). Returns one result per plan,
 * or null when nothing was written and the exact path must decide (see the header).
 */
export async function fastCommit(pool: pg.Pool, plans: readonly CheckpointPlan[]): Promise<CommitResult[] | null> {
  const first = plans[0];
  const last = plans.at(-1);
  if (first === undefined || last === undefined) return [];
  const writes = foldOptimistic(plans);
  if (writes === null) return null;
  const { checkpoint, binding } = last;
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
      ],
    });
    row = res.rows[0]!;
  } catch (error) {
    throw toStorageFailure('commitCheckpoint', first.consumerId, error);
  }
  if (row.version === null) return null;
  const updated = new Set(row.quality_scopes);
  const startVersion = row.version - plans.length;
  return plans.map((plan, index) => ({
    version: startVersion + index + 1,
    position: plan.checkpoint.position,
    ...writes.counts[index]!,
    // In a group a scope counts once, for the plan whose notice was written.
    qualityUpdated: writes.quality.filter((q) => q.plan === index && updated.has(q.scope)).length,
    outboxed: writes.outboxed[index]!,
  }));
}

function receiptColumns(r: readonly ReceiptWrite[]): string[] {
  return [
    textArray(r.map((x) => x.eventId)),
    textArray(r.map((x) => x.contentHash)),
    numberArray(r.map((x) => x.position)),
    numberArray(r.map((x) => x.ordinal)),
    textArray(r.map((x) => x.outcome)),
  ];
}

function executionColumns(e: readonly ExecutionState[]): string[] {
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
