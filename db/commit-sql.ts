// Every statement a commit sends, and the pieces its statements share: each table's insert, each conflict rule
// and the checkpoint row's SET are spelled once here and composed into the exact path's statements (commit.ts,
// and the page consumer's chunk write in pages.ts) and the one-statement fast path (commit-fast.ts). Beside them,
// the builders of the array parameters the statements take.
import type { CommitWrites, ExecutionState, ExistingRows, ReceiptWrite } from '../domain/decide.js';
import type { CheckpointPlan } from '../protocol/types.js';
import { contentHashArray } from './content-hash-column.js';
import { binaryBigintArray, binaryIntArray, binaryTextArray, numberArray, textArray } from './pg-arrays.js';

// The reads of the exact path probe the primary key once per id: LATERAL … LIMIT 1 cannot be flattened into a
// join, so the planner cannot pick a hash join over all of the consumer's rows — which it does whenever its
// statistics lag behind a growing table, making every commit O(table) instead of O(checkpoint).

/**
 * Receipts and quarantine records in one query ($1 consumer, $2 eventIds): both are keyed by eventId and both
 * decide the event's fate. Their position and ordinal come along: a legacy content hash is compared at the
 * position it was saved at.
 */
export const READ_EVENTS_SQL = `SELECT ids.event_id, r.content_hash AS receipt_hash, r.position AS receipt_position, r.ordinal AS receipt_ordinal,
                  r.outcome, q.content_hash AS quarantine_hash, q.position AS quarantine_position,
                  q.ordinal AS quarantine_ordinal, q.disposition
             FROM unnest($2::text[]) AS ids(event_id)
             LEFT JOIN LATERAL (SELECT content_hash, position, ordinal, outcome FROM event_receipts
                                 WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) r ON true
             LEFT JOIN LATERAL (SELECT content_hash, position, ordinal, disposition FROM quarantine
                                 WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) q ON true
            WHERE r.content_hash IS NOT NULL OR q.content_hash IS NOT NULL`;

/** The executions of $2 (entityIds) for consumer $1. */
export const READ_EXECUTIONS_SQL = `SELECT e.entity_id, e.revision, e.market, e.asset, e.side, e.price::text, e.size::text, e.notional::text, e.wallet,
                  e.tx_hash, e.first_position, e.last_position, e.event_id
             FROM unnest($2::text[]) AS ids(entity_id)
             CROSS JOIN LATERAL (SELECT * FROM executions
                                  WHERE consumer_id = $1 AND entity_id = ids.entity_id LIMIT 1) e`;

/** How many of the notices ($2 scopes, $3 positions) are newer than consumer $1's saved quality of their scope. */
export const NEWER_NOTICES_SQL = `SELECT count(*)::int AS newer
             FROM unnest($2::text[], $3::bigint[]) AS n(scope, position)
             LEFT JOIN source_quality q ON q.consumer_id = $1 AND q.scope = n.scope
            WHERE q.last_position IS NULL OR q.last_position < n.position`;

const INSERT_RECEIPTS = 'INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)';

/**
 * Rows from parallel array parameters ($first, $first+1, … in the order of `columns`, each `name type`), as a
 * subquery `alias`. Each array is unnested in the select list: a set-returning function in FROM is first
 * materialised whole into a tuplestore (every row formed, copied and read back: memset and page faults in a server
 * profile); in the select list the arrays are expanded in lockstep as the rows are consumed. Postgres's CPU per
 * streamed event halved with it (20.7 to 10.8 µs at 2,500-event checkpoints). Both forms pad a shorter array with
 * NULLs; ours are all of one length.
 */
function arrayRows(
  alias: string,
  first: number,
  columns: readonly string[],
  last?: { column: string; param: number },
): string {
  const unnest = (column: string, param: number) => {
    const [name, type] = column.split(' ');
    return `unnest($${param}::${type}[]) AS ${name}`;
  };
  const unnested = columns.map((column, k) => unnest(column, first + k));
  if (last !== undefined) unnested.push(unnest(last.column, last.param));
  return `(SELECT ${unnested.join(', ')}) AS ${alias}`;
}

/** Receipt rows from the five arrays of receiptColumns at $first…; the last one is the outcomes. */
function receiptRows(first: number): string {
  return arrayRows('r', first, [
    'event_id text',
    'content_hash bytea',
    'position bigint',
    'ordinal int',
    'outcome text',
  ]);
}

const INSERT_QUARANTINE = `INSERT INTO quarantine (consumer_id, event_id, entity_id, kind, position, ordinal, content_hash, reason, disposition)`;

/** Held records, or terminal ones. A held record seen again stays held; a retried one is held again. */
export const WRITE_QUARANTINE_SQL = `${INSERT_QUARANTINE}
     SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[], $7::bytea[], $8::text[], $9::text[])
     ON CONFLICT (consumer_id, event_id) DO UPDATE
        SET disposition = EXCLUDED.disposition, reason = EXCLUDED.reason, updated_at = now()
      -- never demote a terminal record (an operator's decision) back to held
      WHERE quarantine.disposition <> 'terminal'`;

/** Superseded revisions (the state each correction replaced). */
const INSERT_REVISIONS = `INSERT INTO execution_revisions (consumer_id, entity_id, revision, event_id, position, market, asset, side, price, size,
                                   notional, wallet, tx_hash)`;

/** Deltas added in SQL numeric: exact, whatever any other reader saw. */
const ADD_MARKET_VOLUMES = `INSERT INTO market_volumes (consumer_id, market, volume, execution_count)`;
const ON_MARKET_VOLUME = `ON CONFLICT (consumer_id, market) DO UPDATE
     SET volume = market_volumes.volume + EXCLUDED.volume,
         execution_count = market_volumes.execution_count + EXCLUDED.execution_count, updated_at = now()`;

const INSERT_QUALITY = 'INSERT INTO source_quality (consumer_id, scope, state, last_position, as_of)';
/** Older never overwrites newer: a notice at or below the saved last_position is a no-op. */
const ON_QUALITY_SCOPE = `ON CONFLICT (consumer_id, scope) DO UPDATE
     SET state = EXCLUDED.state, last_position = EXCLUDED.last_position, as_of = EXCLUDED.as_of, updated_at = now()
   WHERE source_quality.last_position < EXCLUDED.last_position`;

/** A suppressed alert is recorded, never sent. */
const INSERT_OUTBOX =
  'INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason)';
const outboxStatus = (reason: string) => `CASE WHEN ${reason} IS NULL THEN 'pending' ELSE 'suppressed' END`;

const INSERT_BINDING = `INSERT INTO consumer_bindings (consumer_id, subscription_id, stream, history_id, filter, filter_hash, generation, mappings)`;
/** The binding of checkpointColumns at $first…$first+6, after the consumer ($1). */
function bindingValues(first: number): string {
  const p = (k: number) => `$${first + k}`;
  return `$1, ${p(0)}, ${p(1)}, ${p(2)}, ${p(3)}::jsonb, ${p(4)}, ${p(5)}, ${p(6)}::jsonb`;
}
/** Skips the write (and its dead tuple) when nothing changed, the common case. */
const ON_BINDING = `ON CONFLICT (consumer_id) DO UPDATE
     SET subscription_id = EXCLUDED.subscription_id, stream = EXCLUDED.stream, history_id = EXCLUDED.history_id,
         filter = EXCLUDED.filter, filter_hash = EXCLUDED.filter_hash, generation = EXCLUDED.generation,
         mappings = EXCLUDED.mappings, updated_at = now()
   WHERE (consumer_bindings.subscription_id, consumer_bindings.stream, consumer_bindings.history_id, consumer_bindings.filter,
          consumer_bindings.filter_hash, consumer_bindings.generation, consumer_bindings.mappings)
         IS DISTINCT FROM
         (EXCLUDED.subscription_id, EXCLUDED.stream, EXCLUDED.history_id, EXCLUDED.filter, EXCLUDED.filter_hash,
          EXCLUDED.generation, EXCLUDED.mappings)`;

/**
 * The checkpoint row after a run: the whole token, never truncated, from checkpointColumns at $first…$first+4; the
 * version moves by one per checkpoint covered ($increment): the compare-and-swap the next commit is fenced on. The
 * totals count the checkpoints and their applied receipts ($outcomes: the receipts' outcome array).
 */
function checkpointSet(first: number, increment: number, outcomes: number): string {
  const p = (k: number) => `$${first + k}`;
  return `SET position = ${p(0)}, token = ${p(1)}, generation = ${p(2)}, cut_position = ${p(3)}, cut_reached = ${p(4)},
         version = version + $${increment}, pending_start = NULL, updated_at = now(), checkpoints_committed = checkpoints_committed + $${increment},
         events_applied = events_applied + cardinality(array_positions($${outcomes}::text[], 'applied'))`;
}

/**
 * The executions a commit writes, split by whether the row exists ($saved[i]): plain INSERTs for the rows proven
 * absent (an upsert writes a speculative insertion too), an overwrite for the others. The checkpoint row lock
 * serialises this consumer's commits, so the state decide() computed is the state to store: no read-modify-write
 * in SQL. `first` is the parameter number of the 13 execution arrays, `saved` of the boolean array.
 */
function executionWriteCtes(first: number, saved: number, guard = '', withUpdates = true): string {
  const rows = arrayRows(
    'x',
    first,
    [
      'entity_id text',
      'revision int',
      'market text',
      'asset text',
      'side text',
      'price numeric',
      'size numeric',
      'notional numeric',
      'wallet text',
      'tx_hash text',
      'first_position bigint',
      'last_position bigint',
      'event_id text',
    ],
    { column: 'saved boolean', param: saved },
  );
  const insert = `INSERT INTO executions (consumer_id, entity_id, revision, market, asset, side, price, size, notional, wallet,
                          tx_hash, first_position, last_position, event_id)
  SELECT $1, entity_id, revision, market, asset, side, price, size, notional, wallet, tx_hash, first_position,
         last_position, event_id
    FROM ${rows}`;
  // `… = ANY($saved)` names no row: Postgres checks it once, and skips the CTE's unnest of the fourteen arrays when
  // no row is for it (a run of new trades updates nothing).
  const and = guard === '' ? 'WHERE' : `${guard} AND`;
  const inserted = `executions_inserted AS (
  ${insert}
   ${and} NOT x.saved AND false = ANY($${saved}::boolean[])
),
`;
  if (!withUpdates) return inserted;
  return `${inserted}executions_updated AS (
  -- an upsert of a row that exists goes straight to its update; unlike UPDATE … FROM, whose join a cached plan may
  -- turn into a scan of all the consumer's executions, it probes the primary key once per row
  ${insert}
   ${and} x.saved AND true = ANY($${saved}::boolean[])
  ON CONFLICT (consumer_id, entity_id) DO UPDATE
     SET revision = EXCLUDED.revision, market = EXCLUDED.market, asset = EXCLUDED.asset, side = EXCLUDED.side,
         price = EXCLUDED.price, size = EXCLUDED.size, notional = EXCLUDED.notional, wallet = EXCLUDED.wallet,
         tx_hash = EXCLUDED.tx_hash, last_position = EXCLUDED.last_position, event_id = EXCLUDED.event_id,
         updated_at = now()
),`;
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
  ${INSERT_RECEIPTS}
  SELECT $1, * FROM ${receiptRows(2)}
),
${executionWriteCtes(7, 51)}
revisions AS (
  ${INSERT_REVISIONS}
  SELECT $1, * FROM unnest($20::text[], $21::int[], $22::text[], $23::bigint[], $24::text[], $25::text[], $26::text[],
                           $27::numeric[], $28::numeric[], $29::numeric[], $30::text[], $31::text[])
),
volumes AS (
  ${ADD_MARKET_VOLUMES}
  SELECT $1, * FROM unnest($32::text[], $33::numeric[], $34::int[])
  ${ON_MARKET_VOLUME}
),
terminal_quarantine AS (
  ${INSERT_QUARANTINE}
  SELECT $1, *, 'terminal' FROM unnest($35::text[], $36::text[], $37::text[], $38::bigint[], $39::int[], $40::bytea[], $41::text[])
  ON CONFLICT (consumer_id, event_id) DO UPDATE SET disposition = 'terminal', updated_at = now()
),
quality AS (
  ${INSERT_QUALITY}
  SELECT $1, * FROM unnest($42::text[], $43::text[], $44::bigint[], $45::bigint[])
  ${ON_QUALITY_SCOPE}
  RETURNING scope
),
outboxed AS (
  -- keyed by <action>:<eventId>: a replayed event never writes its action twice
  ${INSERT_OUTBOX}
  SELECT $1, key, event_id, action, payload, ${outboxStatus('reason')}, reason
    FROM unnest($46::text[], $47::text[], $48::text[], $49::jsonb[], $50::text[]) AS o(key, event_id, action, payload, reason)
  ON CONFLICT (consumer_id, idempotency_key) DO NOTHING
  RETURNING event_id
),
`;
export const EFFECT_PARAM_COUNT = 51;

/** The exact path's write: the effects, then the binding ($52-$58) and checkpoint ($59-$63, $64 the increment). */
export const WRITE_COMMIT_SQL = `${EFFECT_WRITE_CTES}binding AS (
  ${INSERT_BINDING}
  VALUES (${bindingValues(52)})
  ${ON_BINDING}
),
checkpoint AS (
  UPDATE checkpoints
     ${checkpointSet(59, 64, 6)}
   WHERE consumer_id = $1
  RETURNING version
)
SELECT (SELECT version FROM checkpoint) AS version, ARRAY(SELECT scope FROM quality) AS quality_scopes,
       ARRAY(SELECT event_id FROM outboxed) AS outboxed`;

/**
 * The keys whose violation by the fast statement means "not all new": the exact path decides. The receipts' and
 * executions' keys are the proof; the revisions' and the outbox's rows are keyed by the same events and entities,
 * and Postgres may run their CTEs first (a stream replaying from the floor over what a backfill applied trips the
 * outbox's key before the receipts').
 */
export const FAST_PATH_PROOF_CONSTRAINTS: ReadonlySet<string> = new Set([
  'event_receipts_consumer_id_event_id_pk',
  'executions_consumer_id_entity_id_pk',
  'execution_revisions_consumer_id_entity_id_revision_pk',
  'outbox_idempotency_idx',
]);

/** Writes only once the fast path's checkpoint CTE passed the fence and moved the row. */
const IF_CHECKPOINT_MOVED = 'WHERE EXISTS (SELECT 1 FROM checkpoint)';

/**
 * The parts of the fast statement a run may do without. Postgres opens the table and every index of each
 * data-modifying CTE a statement holds, and locks them, whether or not a row reaches it: a one-event commit took
 * about 7% less time without the four below (docs/design.md, The commit). A run writes no superseded revision,
 * overwrites no execution and saves no quality notice unless it corrects or carries one, and has no alert without a
 * whale.
 */
export interface FastCommitParts {
  /** an execution the database holds is overwritten (a correction of an entity the run knows) */
  updates: boolean;
  revisions: boolean;
  outbox: boolean;
  quality: boolean;
}

/** The optional parts' CTEs (FastCommitParts), each ending in its comma. */
const FAST_REVISIONS_CTE = `revisions AS (
  ${INSERT_REVISIONS}
  SELECT $1, v."entityId", v.revision, v."eventId", v.position, v.market, v.asset, v.side, v.price, v.size, v.notional,
         v.wallet, v."txHash"
    FROM json_to_recordset($26::json) AS v("entityId" text, revision int, "eventId" text, position bigint, market text,
                                           asset text, side text, price numeric, size numeric, notional numeric,
                                           wallet text, "txHash" text)
   ${IF_CHECKPOINT_MOVED}
),
`;
const FAST_OUTBOX_CTE = `outboxed AS (
  -- keyed by the eventId, which has no receipt yet: no action of it was ever written
  ${INSERT_OUTBOX}
  SELECT $1, o."idempotencyKey", o."eventId", o.action, o.payload, ${outboxStatus('o."suppressedReason"')},
         o."suppressedReason"
    FROM json_to_recordset($28::json) AS o("idempotencyKey" text, "eventId" text, action text, payload jsonb,
                                           "suppressedReason" text)
   ${IF_CHECKPOINT_MOVED}
),
`;
const FAST_QUALITY_CTE = `quality AS (
  ${INSERT_QUALITY}
  SELECT $1, n.scope, n.state, n.position, n."asOf"
    FROM json_to_recordset($29::json) AS n(scope text, state text, position bigint, "asOf" bigint)
   ${IF_CHECKPOINT_MOVED}
  ${ON_QUALITY_SCOPE}
  RETURNING scope
),
`;

// The fast path's statement (commit-fast.ts says why its proof holds). $1 consumer, $2 lease epoch, $3 version,
// $4 version increment, $5 every position of the run must be above the saved one, $6 generation, $7 the first plan
// is a rebind, $8-$12 receipts, $13-$25 executions (arrays: Postgres reads a thousand-row array several times
// faster than the same rows as json), $26-$29 the short row sets as json (superseded revisions, market deltas,
// outbox, quality: one parameter each), $30-$36 binding, $37-$41 checkpoint, $42 which executions the run knows.
// The receipts name every eventId of the run and the executions every entityId; an eventId with a receipt, or an
// entity the run does not know with an execution, fails its plain INSERT on the primary key
// (FAST_PATH_PROOF_CONSTRAINTS), which aborts the whole statement: nothing is written.
function fastCommitSql(parts: FastCommitParts): string {
  const optional = (included: boolean, cte: string) => (included ? cte : '');
  // Every parameter needs a type even where its part is left out: a plain SELECT that nothing reads gives it one,
  // and Postgres does not run it.
  const leftOut = [
    ...(parts.revisions ? [] : ['$26::json']),
    ...(parts.outbox ? [] : ['$28::json']),
    ...(parts.quality ? [] : ['$29::json']),
  ];
  const leftOutCte = leftOut.length > 0 ? `left_out AS (SELECT ${leftOut.join(', ')}),\n` : '';
  return `
WITH clash AS (
  -- most consumers have no quarantine record at all: one probe of the consumer's key range spares one per event.
  -- Receipts and unknown executions are not probed: their plain INSERTs below fail on the primary key instead.
  SELECT 1 FROM unnest($8::text[]) AS ids(event_id)
    CROSS JOIN LATERAL (SELECT 1 FROM quarantine WHERE consumer_id = $1 AND event_id = ids.event_id LIMIT 1) q
   WHERE EXISTS (SELECT 1 FROM quarantine WHERE consumer_id = $1)
   LIMIT 1
),
checkpoint AS (
  -- the fence, validatePlanAgainstSaved's continuing case, and the proof that no event is quarantined, in one WHERE
  UPDATE checkpoints
     ${checkpointSet(37, 4, 12)}
   WHERE consumer_id = $1 AND lease_epoch = $2 AND version = $3
     AND NOT abandoned AND pending_start IS NULL AND position < $5
     AND (generation = $6 OR ($7 AND generation + 1 = $6))
     AND NOT EXISTS (SELECT 1 FROM clash)
  RETURNING version
),
receipts AS (
  ${INSERT_RECEIPTS}
  SELECT $1, * FROM ${receiptRows(8)}
   ${IF_CHECKPOINT_MOVED}
),
${executionWriteCtes(13, 42, IF_CHECKPOINT_MOVED, parts.updates)}${optional(parts.revisions, FAST_REVISIONS_CTE)}volumes AS (
  ${ADD_MARKET_VOLUMES}
  SELECT $1, m.market, m.volume, m.count
    FROM json_to_recordset($27::json) AS m(market text, volume numeric, count int)
   ${IF_CHECKPOINT_MOVED}
  ${ON_MARKET_VOLUME}
),
${optional(parts.outbox, FAST_OUTBOX_CTE)}${optional(parts.quality, FAST_QUALITY_CTE)}${leftOutCte}binding AS (
  ${INSERT_BINDING}
  SELECT ${bindingValues(30)}
   ${IF_CHECKPOINT_MOVED}
  ${ON_BINDING}
)
SELECT (SELECT version FROM checkpoint) AS version,
       ${parts.quality ? 'ARRAY(SELECT scope FROM quality)' : `'{}'::text[]`} AS quality_scopes`;
}

/** The optional parts in the order of their bits in a variant's index. */
const OPTIONAL_PARTS = ['updates', 'revisions', 'outbox', 'quality'] as const;

/** The parts of the variant at `variant`: bit k set includes OPTIONAL_PARTS[k]. */
function partsOf(variant: number): FastCommitParts {
  const has = (part: keyof FastCommitParts) => (variant & (1 << OPTIONAL_PARTS.indexOf(part))) !== 0;
  return { updates: has('updates'), revisions: has('revisions'), outbox: has('outbox'), quality: has('quality') };
}

/** Each combination of parts as its own prepared statement, built once, at the index fastCommitStatement computes. */
const FAST_COMMIT_STATEMENTS = Array.from({ length: 1 << OPTIONAL_PARTS.length }, (_, variant) => ({
  name: `whalehunt_commit_fast_${variant}`,
  text: fastCommitSql(partsOf(variant)),
}));

/** The fast statement that carries `parts` and no more: its prepared statement's name and text. */
export function fastCommitStatement(parts: FastCommitParts): { name: string; text: string } {
  const variant = OPTIONAL_PARTS.reduce((bits, part, bit) => (parts[part] ? bits | (1 << bit) : bits), 0);
  return FAST_COMMIT_STATEMENTS[variant]!;
}

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
    contentHashArray(q.map((x) => x.contentHash)),
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
export function receiptColumns(r: readonly ReceiptWrite[]): Buffer[] {
  return [
    binaryTextArray(r.map((x) => x.eventId)),
    contentHashArray(r.map((x) => x.contentHash)),
    binaryBigintArray(r.map((x) => x.position)),
    binaryIntArray(r.map((x) => x.ordinal)),
    binaryTextArray(r.map((x) => x.outcome)),
  ];
}

/**
 * Execution rows as the thirteen array parameters both commit statements take, in the tables' column order; the
 * money columns as numeric text (Postgres's binary numeric is base-10000 digit groups, not worth writing here).
 */
export function executionColumns(e: readonly ExecutionState[]): (Buffer | string)[] {
  return [
    binaryTextArray(e.map((x) => x.entityId)),
    binaryIntArray(e.map((x) => x.revision)),
    binaryTextArray(e.map((x) => x.market)),
    binaryTextArray(e.map((x) => x.asset)),
    binaryTextArray(e.map((x) => x.side)),
    numberArray(e.map((x) => x.price)),
    numberArray(e.map((x) => x.size)),
    numberArray(e.map((x) => x.notional)),
    binaryTextArray(e.map((x) => x.wallet)),
    binaryTextArray(e.map((x) => x.txHash)),
    binaryBigintArray(e.map((x) => x.firstPosition)),
    binaryBigintArray(e.map((x) => x.lastPosition)),
    binaryTextArray(e.map((x) => x.eventId)),
  ];
}
