// commitCheckpoint(s): one transaction in three steps (docs/design.md "The commit: read, decide, write"), for one
// checkpoint or a run of consecutive ones (group commit).
//   read   — fence on the checkpoint row (FOR UPDATE: every mutation of a consumer serialises here), then one
//            query for the receipts/quarantine of the run's eventIds and one for the executions of its entityIds;
//   decide — decideCommit() on each plan in turn, pure (commit-fold.ts);
//   write  — one statement of set-based data-modifying CTEs (unnest arrays, ON CONFLICT), ending with the
//            checkpoint row.
// BEGIN, lock, two reads, one write, COMMIT: six round trips whatever the size of the run. Runs whose events are
// all new skip all of it: one fenced statement proves them new and writes them (commit-fast.ts).
import type pg from 'pg';
import {
  type AlertCounts,
  validatePlanAgainstSaved,
  validatePlanShape,
  type CommitWrites,
  type ExecutionState,
  type ExistingQuarantine,
  type ExistingReceipt,
  type ExistingRows,
  type QuarantineWrite,
} from '../domain/decide.js';
import { commitHeld, type CommitConflict, type CommitHeld } from '../domain/outcomes.js';
import type { CheckpointPlan, StagedEvent } from '../protocol/types.js';
import type { OuterJoined, RawRow } from './rows.js';
import type { eventReceipts, executions as executionsTable, quarantine as quarantineTable } from './schema.js';
import {
  checkpointColumns,
  executionColumns,
  executionWriteCtes,
  fastCommit,
  receiptColumns,
  savedColumn,
} from './commit-fast.js';
import { foldPlans, type FoldedWrites } from './commit-fold.js';
import { numberArray, textArray } from './pg-arrays.js';
import type { RecentExecutions } from './recent-executions.js';
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
  /** Whale alerts the commit queued to send, and those it recorded as suppressed (by reason). */
  alerts: AlertCounts;
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
  if (whileLocked === undefined) return (await commitCheckpoints(pool, [plan]))[0]!;
  validatePlanShape(plan);
  const { outcomes } = await inTransaction(pool, 'commitCheckpoint', plan.consumerId, (client) =>
    commitRunLocked(client, [plan], whileLocked),
  );
  return outcomes[0]!;
}

/**
 * Commits consecutive checkpoint plans of one session and generation (a consumer that fell behind) together:
 * one transaction, one WAL flush, ACKs in order afterwards (docs/protocol.md §5, group commit). plans[0].fence is
 * the fence; each later plan is fenced on the version the one before it commits (their own fences are ignored).
 * Returns one outcome per plan, in order, up to and including the first that did not commit: the plans before
 * it are committed, it is answered exactly as if committed alone (a held quarantine records its held events), and
 * nothing after it is written. Throws like commitCheckpoint, possibly after committing earlier plans of the run.
 */
export async function commitCheckpoints(
  pool: pg.Pool,
  plans: readonly CheckpointPlan[],
  /** The executions the calling run knows (it may decide corrections of them in the one statement); kept current. */
  recent?: RecentExecutions,
): Promise<CheckpointOutcome[]> {
  for (const plan of plans) validatePlanShape(plan);
  const outcomes: CheckpointOutcome[] = [];
  let rest = plans;
  let fence = plans[0]?.fence;
  while (rest.length > 0 && fence !== undefined) {
    const run = [{ ...rest[0]!, fence }, ...rest.slice(1)];
    // A commit whose answer is lost may have moved the version: rows known at the old one are then never used.
    const fast = await fastCommit(pool, run, recent?.at(fence) ?? NONE_KNOWN);
    const { outcomes: part, executions: touched } = fast
      ? {
          outcomes: fast.results.map((result) => ({ kind: 'committed' as const, ...result })),
          executions: fast.executions,
        }
      : await inTransaction(pool, 'commitCheckpoint', run[0]!.consumerId, (client) => commitRunLocked(client, run));
    outcomes.push(...part);
    const last = part.findLast((outcome) => outcome.kind === 'committed');
    if (last !== undefined) {
      const reached = { leaseEpoch: fence.leaseEpoch, version: last.version };
      recent?.committed(fence, reached, touched);
      fence = reached;
    }
    if (part.at(-1)?.kind !== 'committed') break;
    rest = rest.slice(part.length);
  }
  return outcomes;
}

const NONE_KNOWN: ReadonlyMap<string, ExecutionState> = new Map();

/**
 * The exact path, inside the caller's transaction: fence under the row lock, one read for the whole run, the fold
 * (commit-fold.ts), one write. Answers a prefix of the run: up to its first refusal, or up to a plan that does not
 * continue the one before it (the caller commits the rest next).
 */
async function commitRunLocked(
  client: pg.PoolClient,
  plans: readonly CheckpointPlan[],
  whileLocked?: () => void | Promise<void>,
): Promise<{ outcomes: CheckpointOutcome[]; executions: ExecutionState[] }> {
  const first = plans[0]!;
  const saved = await lockCheckpoint(client, first.consumerId);
  if (!saved || saved.leaseEpoch !== first.fence.leaseEpoch || saved.version !== first.fence.version) {
    const actual = saved ? { leaseEpoch: saved.leaseEpoch, version: saved.version } : null;
    return { outcomes: [{ kind: 'fenced', expected: first.fence, actual }], executions: [] };
  }
  validatePlanAgainstSaved(first, saved);
  await whileLocked?.();
  const unchanged = await unchangedCommit(client, first, saved);
  if (unchanged) return { outcomes: [{ kind: 'committed', ...unchanged }], executions: [] };

  const existing = await readExisting(
    client,
    first.consumerId,
    plans.flatMap((plan) => plan.events),
  );
  const { writes, stop } = foldPlans(plans, existing);
  const outcomes: CheckpointOutcome[] =
    writes.count > 0
      ? (await writeRun(client, plans.slice(0, writes.count), writes, existing.executions)).map((result) => ({
          kind: 'committed',
          ...result,
        }))
      : [];
  switch (stop?.kind) {
    case 'conflict':
      outcomes.push(stop);
      break;
    case 'held_quarantine':
      // Nothing of this checkpoint has been written (the fold stopped before it), so committing only its held
      // records is the "roll back the checkpoint, record the quarantine" the protocol asks for — still under
      // this attempt's fence, so a zombie attempt cannot record anything either.
      await writeQuarantine(client, first.consumerId, stop.held);
      outcomes.push(commitHeld(stop.held));
      break;
  }
  // What the database holds now for every entity read or written (the caller's RecentExecutions).
  return { outcomes, executions: [...existing.executions.values(), ...writes.executions] };
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
 * EFFECT_WRITE_CTES are the effects of decide()'s writes ($1 consumer, $2-$51 from effectWriteValues); each
 * source appends the CTEs of its own progress row (parameters from $52) and a SELECT that may read `quality` and
 * `outboxed`: the stream its binding and checkpoint, the page consumer its applied position.
 */
export const EFFECT_WRITE_CTES = `
WITH receipts AS (
  -- dedup receipts: the durable outcome of every new event
  INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
  SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::int[], $6::text[])
),
${executionWriteCtes(7, 51)}
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
  SELECT $1, * FROM unnest($42::text[], $43::text[], $44::bigint[], $45::bigint[])
  ON CONFLICT (consumer_id, scope) DO UPDATE
     SET state = EXCLUDED.state, last_position = EXCLUDED.last_position, as_of = EXCLUDED.as_of, updated_at = now()
   WHERE source_quality.last_position < EXCLUDED.last_position
  RETURNING scope
),
outboxed AS (
  -- keyed by <action>:<eventId>: a replayed event never writes its action twice; a suppressed alert is recorded,
  -- never sent
  INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason)
  SELECT $1, key, event_id, action, payload, CASE WHEN reason IS NULL THEN 'pending' ELSE 'suppressed' END, reason
    FROM unnest($46::text[], $47::text[], $48::text[], $49::jsonb[], $50::text[]) AS o(key, event_id, action, payload, reason)
  ON CONFLICT (consumer_id, idempotency_key) DO NOTHING
  RETURNING event_id
),
`;
export const EFFECT_PARAM_COUNT = 51;

const WRITE_COMMIT_SQL = `${EFFECT_WRITE_CTES}binding AS (
  INSERT INTO consumer_bindings (consumer_id, subscription_id, stream, history_id, filter, filter_hash, generation, mappings)
  VALUES ($1, $52, $53, $54, $55::jsonb, $56, $57, $58::jsonb)
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
  -- the whole token, never truncated; the version moves by one per checkpoint covered ($64): the compare-and-swap
  -- the next commit is fenced on. The totals count the checkpoints and their applied receipts ($6: outcomes).
  UPDATE checkpoints
     SET position = $59, token = $60, generation = $61, cut_position = $62, cut_reached = $63,
         version = version + $64, pending_start = NULL, updated_at = now(), checkpoints_committed = checkpoints_committed + $64,
         events_applied = events_applied + (SELECT count(*) FROM unnest($6::text[]) AS r(outcome) WHERE outcome = 'applied')
   WHERE consumer_id = $1
  RETURNING version
)
SELECT (SELECT version FROM checkpoint) AS version, ARRAY(SELECT scope FROM quality) AS quality_scopes,
       ARRAY(SELECT event_id FROM outboxed) AS outboxed`;

/**
 * $1-$51 of EFFECT_WRITE_CTES: the consumer and decide()'s writes; `asOf` is the position saved with each quality
 * notice (one for all, or one per notice); `saved` the executions the read step found.
 */
export function effectWriteValues(
  consumerId: string,
  writes: Omit<CommitWrites, 'counts'>,
  asOf: number | readonly number[],
  saved: ExistingRows['executions'],
): unknown[] {
  const { receipts: r, executions: e, revisions: v, marketDeltas: m, quarantine: q, quality: n, outbox: o } = writes;
  return [
    consumerId,
    // $2-$6 receipts
    ...receiptColumns(r),
    // $7-$19 executions
    ...executionColumns(e),
    // $20-$31 superseded revisions
    textArray(v.map((x) => x.entityId)),
    numberArray(v.map((x) => x.revision)),
    textArray(v.map((x) => x.eventId)),
    numberArray(v.map((x) => x.position)),
    textArray(v.map((x) => x.market)),
    textArray(v.map((x) => x.asset)),
    textArray(v.map((x) => x.side)),
    numberArray(v.map((x) => x.price)),
    numberArray(v.map((x) => x.size)),
    numberArray(v.map((x) => x.notional)),
    textArray(v.map((x) => x.wallet)),
    textArray(v.map((x) => x.txHash)),
    // $32-$34 market deltas
    textArray(m.map((x) => x.market)),
    numberArray(m.map((x) => x.volume)),
    numberArray(m.map((x) => x.count)),
    // $35-$41 terminal quarantine
    textArray(q.map((x) => x.eventId)),
    textArray(q.map((x) => x.entityId)),
    textArray(q.map((x) => x.kind)),
    numberArray(q.map((x) => x.position)),
    numberArray(q.map((x) => x.ordinal)),
    textArray(q.map((x) => x.contentHash)),
    textArray(q.map((x) => x.reason)),
    // $42-$45 quality
    textArray(n.map((x) => x.scope)),
    textArray(n.map((x) => x.state)),
    numberArray(n.map((x) => x.position)),
    numberArray(typeof asOf === 'number' ? n.map(() => asOf) : asOf),
    // $46-$50 outbox
    textArray(o.map((x) => x.idempotencyKey)),
    textArray(o.map((x) => x.eventId)),
    textArray(o.map((x) => x.action)),
    textArray(o.map((x) => JSON.stringify(x.payload))),
    textArray(o.map((x) => x.suppressedReason)),
    // $51 which executions exist
    savedColumn(e, saved),
  ];
}

/** Writes a folded run of plans (commit-fold.ts) in one statement; one result per plan. */
async function writeRun(
  client: pg.PoolClient,
  plans: readonly CheckpointPlan[],
  writes: FoldedWrites,
  saved: ExistingRows['executions'],
): Promise<CommitResult[]> {
  // A named statement: parsed once per connection instead of on every commit (the statement is large).
  const res = await client.query<{ version: number | null; quality_scopes: string[]; outboxed: string[] }>({
    name: 'whalehunt_commit_write',
    text: WRITE_COMMIT_SQL,
    values: [
      ...effectWriteValues(
        plans[0]!.consumerId,
        writes,
        writes.quality.map((n) => n.asOf),
        saved,
      ),
      // $52-$58 binding, $59-$63 checkpoint
      ...checkpointColumns(plans.at(-1)!),
      // $64 one version per checkpoint
      plans.length,
    ],
  });
  const row = res.rows[0]!;
  const updated = new Set(row.quality_scopes);
  const outboxed = new Set(row.outboxed);
  const startVersion = row.version! - plans.length;
  let outboxFrom = 0;
  return plans.map((plan, index) => {
    // writes.outbox holds each plan's actions in turn; count those the statement inserted
    const planOutbox = writes.outbox.slice(outboxFrom, (outboxFrom += writes.outboxed[index]!));
    return {
      version: startVersion + index + 1,
      position: plan.checkpoint.position,
      ...writes.counts[index]!,
      // In a run a scope counts once, for the plan whose notice was written.
      qualityUpdated: writes.quality.filter((q) => q.plan === index && updated.has(q.scope)).length,
      outboxed: planOutbox.filter((o) => outboxed.has(o.eventId)).length,
    };
  });
}
