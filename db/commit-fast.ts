// The optimistic commit: ONE fenced statement, outside any explicit transaction (a single statement is atomic), for
// checkpoints whose events are all new to the database — the common case of a stream moving forward. The client
// decides as if the database held no receipt or quarantine record for the plans' eventIds and, of the entities they
// correct, only the executions the run knows (RecentExecutions: rows it wrote or read at the version the fence names);
// the statement proves that assumption under the fence and writes only if it holds: it probes the quarantine for
// the eventIds, and the plain INSERTs of the receipts and of the executions the run does not know fail on their
// primary keys if any exists, which aborts the whole statement (probing each id beforehand cost the database as
// much again as the inserts' own uniqueness checks). When it does not hold (a duplicate, a correction of an entity
// the run does not know, a quarantine record, a moved fence, a plan the saved state refuses), nothing is written
// and the caller runs the read-decide-write path, which then answers exactly.
//
// Why the quarantine probe holds although it reads the statement's snapshot, taken before the checkpoint row is
// locked (a uniqueness check sees the latest rows anyway): every writer of quarantine records and executions bumps
// the checkpoint version (or the lease epoch) under that lock, so the fence comparing the LATEST row with what this
// attempt holds fails if any of them committed after the plan was made — and anything committed before is in the
// snapshot. The same fence keeps the known executions exact.
//
// Every event of such a run has a receipt (an in-run duplicate shares the first one's) and its entity an execution,
// so the receipts and executions inserted cover every id the proof is about.
//
// Several consecutive plans of one session (a group commit) are folded the same way, in order, each seeing the
// previous ones' effects, and committed by the same one statement: one round trip and one WAL flush for all.
import type pg from 'pg';
import { foldPlans, type FoldedWrites } from '../domain/commit-fold.js';
import type { ExecutionState } from '../domain/decide.js';
import type { CheckpointPlan } from '../protocol/types.js';
import {
  checkpointColumns,
  executionColumns,
  fastCommitStatement,
  FAST_PATH_PROOF_CONSTRAINTS,
  receiptColumns,
  savedColumn,
} from './commit-sql.js';
import type { CommitResult } from './commit-types.js';
import type { KnownExecutions } from './recent-executions.js';
import { SQLSTATE, toStorageFailure } from './transaction.js';

/**
 * Only trades and corrections can be new to the database: a run with any other kind would be folded in vain. A
 * correction of an entity neither traded in the run nor known to it stops the fold itself (it is quarantined), so
 * it is not looked for here: that cost a set of every traded entity per run.
 */
function onlyTradesAndCorrections(plans: readonly CheckpointPlan[]): boolean {
  for (const plan of plans) {
    for (const event of plan.events) if (event.kind !== 'trade' && event.kind !== 'correction') return false;
  }
  return true;
}

/**
 * The known rows of the entities the run corrects: what the fold starts from besides what the proof shows absent.
 * Trades are not looked up (a lookup per streamed event): a trade's entity is new but in a replay of a trade under
 * another eventId, and then the plain INSERT of its execution fails the statement and the exact path decides.
 */
function knownRowsOf(plans: readonly CheckpointPlan[], known: KnownExecutions): Map<string, ExecutionState> {
  const rows = new Map<string, ExecutionState>();
  for (const plan of plans) {
    for (const event of plan.events) {
      if (event.kind !== 'correction') continue;
      const row = known.get(event.entityId);
      if (row !== undefined) rows.set(event.entityId, row);
    }
  }
  return rows;
}

/** A receipt or an unknown execution existed: the statement was aborted whole, and the exact path decides. */
function provedNotNew(error: unknown): boolean {
  const { code, constraint } = (error ?? {}) as { code?: unknown; constraint?: unknown };
  return (
    code === SQLSTATE.uniqueViolation && typeof constraint === 'string' && FAST_PATH_PROOF_CONSTRAINTS.has(constraint)
  );
}

/** What the one statement committed: one result per plan, and the executions it wrote (their new rows). */
export interface FastCommitted {
  results: CommitResult[];
  executions: ExecutionState[];
}

/** What the fast statement sends, and what its answer is read with: nothing else of the fold. */
interface PreparedFastCommit {
  statement: { name: string; text: string };
  values: unknown[];
  counts: FoldedWrites['counts'];
  quality: FoldedWrites['quality'];
  outboxed: FoldedWrites['outboxed'];
  executions: ExecutionState[];
}

/**
 * The fold of the run and the statement's parameters, or null when the fold says the run is not all new. Outside the
 * async function on purpose: only what this returns lives through the round trip, so the fold's rows the answer does
 * not need (receipts, outbox payloads, …) are garbage by then, not copied by the young collections that run
 * meanwhile (4% fewer bytes copied per streamed event).
 */
function prepareFastCommit(plans: readonly CheckpointPlan[], known: KnownExecutions): PreparedFastCommit | null {
  const first = plans[0]!;
  const last = plans.at(-1)!;
  if (!onlyTradesAndCorrections(plans)) return null;
  const saved = knownRowsOf(plans, known);
  const fold = foldPlans(plans, { receipts: new Map(), quarantine: new Map(), executions: saved });
  if (fold.stop !== null || fold.writes.quarantine.length > 0) return null;
  const { writes } = fold;
  // Every event is at or below its checkpoint and in journal order: the first event is the lowest position.
  const floor = first.events[0]?.position ?? first.checkpoint.position;
  return {
    statement: fastCommitStatement({
      updates: writes.executions.some((x) => saved.has(x.entityId)),
      revisions: writes.revisions.length > 0,
      outbox: writes.outbox.length > 0,
      quality: writes.quality.length > 0,
    }),
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
    counts: writes.counts,
    quality: writes.quality,
    outboxed: writes.outboxed,
    executions: writes.executions,
  };
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
  known: KnownExecutions,
): Promise<FastCommitted | null> {
  const first = plans[0];
  if (first === undefined) return { results: [], executions: [] };
  const prepared = prepareFastCommit(plans, known);
  if (prepared === null) return null;
  const { counts, quality, outboxed, executions } = prepared;
  let row: { version: number | null; quality_scopes: string[] };
  try {
    const res = await pool.query<{ version: number | null; quality_scopes: string[] }>({
      ...prepared.statement,
      values: prepared.values,
    });
    row = res.rows[0]!;
  } catch (error) {
    if (provedNotNew(error)) return null;
    throw toStorageFailure('commitCheckpoint', first.consumerId, error);
  }
  if (row.version === null) return null;
  const updated = new Set(row.quality_scopes);
  const startVersion = row.version - plans.length;
  const results = plans.map((plan, index) => ({
    version: startVersion + index + 1,
    position: plan.checkpoint.position,
    ...counts[index]!,
    // In a group a scope counts once, for the plan whose notice was written.
    qualityUpdated: quality.filter((q) => q.plan === index && updated.has(q.scope)).length,
    outboxed: outboxed[index]!,
  }));
  return { results, executions };
}
