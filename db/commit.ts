// commitCheckpoint(s): one transaction in three steps (docs/design.md "The commit: read, decide, write"), for one
// checkpoint or a run of consecutive ones (group commit).
//   read   — fence on the checkpoint row (FOR UPDATE: every mutation of a consumer serialises here), then one
//            query for the receipts/quarantine of the run's eventIds and one for the executions of its entityIds;
//   decide — decideCommit() on each plan in turn, pure (domain/commit-fold.ts);
//   write  — one statement of set-based data-modifying CTEs (unnest arrays, ON CONFLICT), ending with the
//            checkpoint row.
// BEGIN, lock, two reads, one write, COMMIT: six round trips whatever the size of the run. Runs whose events are
// all new skip all of it: one fenced statement proves them new and writes them (commit-fast.ts). Every statement
// is in commit-sql.ts.
import type pg from 'pg';
import { foldPlans, type FoldedWrites } from '../domain/commit-fold.js';
import {
  validatePlanAgainstSaved,
  validatePlanShape,
  type ExecutionState,
  type ExistingQuarantine,
  type ExistingReceipt,
  type ExistingRows,
  type QuarantineWrite,
} from '../domain/decide.js';
import { commitHeld } from '../domain/outcomes.js';
import type { CheckpointPlan, StagedEvent } from '../protocol/types.js';
import type { OuterJoined, RawRow } from './rows.js';
import type { eventReceipts, executions as executionsTable, quarantine as quarantineTable } from './schema.js';
import { fastCommit } from './commit-fast.js';
import {
  checkpointColumns,
  effectWriteValues,
  READ_EVENTS_SQL,
  READ_EXECUTIONS_SQL,
  WRITE_COMMIT_SQL,
  WRITE_QUARANTINE_SQL,
} from './commit-sql.js';
import type { CheckpointFenced, CheckpointOutcome, CommitResult } from './commit-types.js';
import { contentHashArray, contentHashOf } from './content-hash-column.js';
import type { KnownExecutions, RecentExecutions } from './recent-executions.js';
import { lockCheckpoint } from './state.js';
import { inTransaction } from './transaction.js';
import { unchangedCommit } from './unchanged-checkpoint.js';

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

const NONE_KNOWN: KnownExecutions = new Map<string, ExecutionState>();

/**
 * The exact path, inside the caller's transaction: fence under the row lock, one read for the whole run, the fold
 * (domain/commit-fold.ts), one write. Answers a prefix of the run: up to its first refusal, or up to a plan that
 * does not continue the one before it (the caller commits the rest next).
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

  // Each read probes the primary key once per id (commit-sql.ts says why).
  const eventIds = [...new Set(events.map((e) => e.eventId))];
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
    text: READ_EVENTS_SQL,
    values: [consumerId, eventIds],
  });
  for (const row of byEvent.rows) {
    if (row.receipt_hash !== null && row.outcome !== null) {
      receipts.set(row.event_id, {
        contentHash: contentHashOf(row.receipt_hash),
        position: Number(row.receipt_position),
        ordinal: row.receipt_ordinal!,
        outcome: row.outcome,
      });
    }
    if (row.quarantine_hash !== null && row.disposition !== null) {
      quarantine.set(row.event_id, {
        contentHash: contentHashOf(row.quarantine_hash),
        position: Number(row.quarantine_position),
        ordinal: row.quarantine_ordinal!,
        disposition: row.disposition,
      });
    }
  }

  const entityIds = [...new Set(events.map((e) => e.entityId))];
  const byEntity = await client.query<Omit<RawRow<typeof executionsTable>, 'consumer_id' | 'updated_at'>>({
    name: 'whalehunt_commit_read_executions',
    text: READ_EXECUTIONS_SQL,
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
  await client.query(WRITE_QUARANTINE_SQL, [
    consumerId,
    records.map((r) => r.eventId),
    records.map((r) => r.entityId),
    records.map((r) => r.kind),
    records.map((r) => r.position),
    records.map((r) => r.ordinal),
    contentHashArray(records.map((r) => r.contentHash)),
    records.map((r) => r.reason),
    records.map((r) => r.disposition),
  ]);
}

/** Writes a folded run of plans (domain/commit-fold.ts) in one statement; one result per plan. */
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
