// commitCheckpoint: one transaction in three steps (DESIGN.md "The commit: read, decide, write").
//   read   — fence on the checkpoint row (FOR UPDATE: every mutation of a consumer serialises here), then one
//            query for the receipts/quarantine of the plan's eventIds and one for the executions of its entityIds;
//   decide — decideCommit(), pure;
//   write  — set-based statements (unnest arrays, ON CONFLICT), one per table, then the checkpoint row.
// A 1,000-event checkpoint is a dozen round trips whatever its size.
import type pg from 'pg';
import type { CheckpointPlan } from '../protocol/types.js';
import {
  decideCommit,
  validatePlanAgainstSaved,
  validatePlanShape,
  type CommitWrites,
  type ExecutionState,
  type ExistingQuarantine,
  type ExistingReceipt,
  type QuarantineWrite,
} from './decide.js';
import { ConflictingEvent, Fenced, HeldQuarantine } from './errors.js';
import { lockCheckpoint } from './state.js';
import { inTransaction } from './transaction.js';

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

type Outcome = { kind: 'committed'; result: CommitResult } | { kind: 'held'; held: QuarantineWrite[] };

/**
 * Commits one checkpoint plan atomically, or throws: Fenced (another attempt owns the consumer),
 * ConflictingEvent (same eventId, different content), HeldQuarantine (events the reducer cannot apply were
 * recorded as held; the checkpoint did not move), InvalidPlan (nothing written), StorageFailure.
 */
export async function commitCheckpoint(pool: pg.Pool, plan: CheckpointPlan): Promise<CommitResult> {
  const parsed = validatePlanShape(plan);
  const outcome = await inTransaction(pool, 'commitCheckpoint', plan.consumerId, async (client): Promise<Outcome> => {
    const saved = await lockCheckpoint(client, plan.consumerId);
    if (!saved || saved.leaseEpoch !== plan.fence.leaseEpoch || saved.version !== plan.fence.version) {
      throw new Fenced(plan.consumerId, plan.fence, saved ? { leaseEpoch: saved.leaseEpoch, version: saved.version } : null);
    }
    validatePlanAgainstSaved(plan, saved);

    const existing = await readExisting(client, plan);
    const decision = decideCommit(plan, existing, parsed);
    if (decision.outcome === 'conflict') {
      throw new ConflictingEvent(decision.eventId, decision.savedHash, decision.incomingHash);
    }
    if (decision.outcome === 'held_quarantine') {
      // Nothing of the checkpoint has been written (decide runs before any write), so committing only the
      // held records is the "roll back the checkpoint, record the quarantine" the protocol asks for — still
      // under this attempt's fence, so a zombie attempt cannot record anything either.
      await writeQuarantine(client, plan.consumerId, decision.held);
      return { kind: 'held', held: decision.held };
    }
    const result = await writeCommit(client, plan, decision.writes);
    return { kind: 'committed', result };
  });
  if (outcome.kind === 'held') {
    throw new HeldQuarantine(
      outcome.held.map(({ eventId, entityId, kind, position, reason }) => ({ eventId, entityId, kind, position, reason })),
    );
  }
  return outcome.result;
}

async function readExisting(client: pg.PoolClient, plan: CheckpointPlan) {
  const receipts = new Map<string, ExistingReceipt>();
  const quarantine = new Map<string, ExistingQuarantine>();
  const executions = new Map<string, ExecutionState>();
  if (plan.events.length === 0) return { receipts, quarantine, executions };

  const eventIds = [...new Set(plan.events.map((e) => e.eventId))];
  // Receipts and quarantine records in one query: both are keyed by eventId and both decide the event's fate.
  const byEvent = await client.query<{
    event_id: string;
    receipt_hash: string | null;
    outcome: ExistingReceipt['outcome'] | null;
    quarantine_hash: string | null;
    disposition: ExistingQuarantine['disposition'] | null;
  }>(
    `SELECT ids.event_id, r.content_hash AS receipt_hash, r.outcome, q.content_hash AS quarantine_hash, q.disposition
       FROM unnest($2::text[]) AS ids(event_id)
       LEFT JOIN event_receipts r ON r.consumer_id = $1 AND r.event_id = ids.event_id
       LEFT JOIN quarantine q ON q.consumer_id = $1 AND q.event_id = ids.event_id
      WHERE r.event_id IS NOT NULL OR q.event_id IS NOT NULL`,
    [plan.consumerId, eventIds],
  );
  for (const row of byEvent.rows) {
    if (row.receipt_hash !== null && row.outcome !== null) receipts.set(row.event_id, { contentHash: row.receipt_hash, outcome: row.outcome });
    if (row.quarantine_hash !== null && row.disposition !== null) {
      quarantine.set(row.event_id, { contentHash: row.quarantine_hash, disposition: row.disposition });
    }
  }

  const entityIds = [...new Set(plan.events.map((e) => e.entityId))];
  const byEntity = await client.query<{
    entity_id: string;
    revision: number;
    market: string;
    asset: string;
    side: string;
    price: string;
    size: string;
    notional: string;
    wallet: string;
    tx_hash: string;
    first_position: string;
    last_position: string;
    event_id: string;
  }>(
    `SELECT entity_id, revision, market, asset, side, price::text, size::text, notional::text, wallet, tx_hash,
            first_position, last_position, event_id
       FROM executions
      WHERE consumer_id = $1 AND entity_id = ANY($2::text[])`,
    [plan.consumerId, entityIds],
  );
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
async function writeQuarantine(client: pg.PoolClient, consumerId: string, records: QuarantineWrite[]): Promise<void> {
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

async function writeCommit(client: pg.PoolClient, plan: CheckpointPlan, writes: CommitWrites): Promise<CommitResult> {
  const consumerId = plan.consumerId;
  const { receipts, executions, revisions, marketDeltas, quality, outbox } = writes;

  if (receipts.length > 0) {
    await client.query(
      `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
       SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::int[], $6::text[])`,
      [
        consumerId,
        receipts.map((r) => r.eventId),
        receipts.map((r) => r.contentHash),
        receipts.map((r) => r.position),
        receipts.map((r) => r.ordinal),
        receipts.map((r) => r.outcome),
      ],
    );
  }

  if (executions.length > 0) {
    // The checkpoint row lock serialises this consumer's commits, so the state decide() computed from the
    // rows read above is the state to store: a plain overwrite, no read-modify-write in SQL.
    await client.query(
      `INSERT INTO executions (consumer_id, entity_id, revision, market, asset, side, price, size, notional, wallet, tx_hash,
                               first_position, last_position, event_id)
       SELECT $1, * FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::numeric[], $8::numeric[],
                                $9::numeric[], $10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::text[])
       ON CONFLICT (consumer_id, entity_id) DO UPDATE
          SET revision = EXCLUDED.revision, market = EXCLUDED.market, asset = EXCLUDED.asset, side = EXCLUDED.side,
              price = EXCLUDED.price, size = EXCLUDED.size, notional = EXCLUDED.notional, wallet = EXCLUDED.wallet,
              tx_hash = EXCLUDED.tx_hash, last_position = EXCLUDED.last_position, event_id = EXCLUDED.event_id,
              updated_at = now()`,
      [
        consumerId,
        executions.map((e) => e.entityId),
        executions.map((e) => e.revision),
        executions.map((e) => e.market),
        executions.map((e) => e.asset),
        executions.map((e) => e.side),
        executions.map((e) => e.price),
        executions.map((e) => e.size),
        executions.map((e) => e.notional),
        executions.map((e) => e.wallet),
        executions.map((e) => e.txHash),
        executions.map((e) => e.firstPosition),
        executions.map((e) => e.lastPosition),
        executions.map((e) => e.eventId),
      ],
    );
  }

  if (revisions.length > 0) {
    await client.query(
      `INSERT INTO execution_revisions (consumer_id, entity_id, revision, event_id, position, market, asset, side, price, size,
                                        notional, wallet, tx_hash)
       SELECT $1, * FROM unnest($2::text[], $3::int[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[],
                                $9::numeric[], $10::numeric[], $11::numeric[], $12::text[], $13::text[])`,
      [
        consumerId,
        revisions.map((r) => r.entityId),
        revisions.map((r) => r.revision),
        revisions.map((r) => r.eventId),
        revisions.map((r) => r.position),
        revisions.map((r) => r.market),
        revisions.map((r) => r.asset),
        revisions.map((r) => r.side),
        revisions.map((r) => r.price),
        revisions.map((r) => r.size),
        revisions.map((r) => r.notional),
        revisions.map((r) => r.wallet),
        revisions.map((r) => r.txHash),
      ],
    );
  }

  if (marketDeltas.length > 0) {
    // Deltas, added in SQL numeric: exact, and independent of what any other reader saw.
    await client.query(
      `INSERT INTO market_volumes (consumer_id, market, volume, execution_count)
       SELECT $1, * FROM unnest($2::text[], $3::numeric[], $4::int[])
       ON CONFLICT (consumer_id, market) DO UPDATE
          SET volume = market_volumes.volume + EXCLUDED.volume,
              execution_count = market_volumes.execution_count + EXCLUDED.execution_count,
              updated_at = now()`,
      [consumerId, marketDeltas.map((d) => d.market), marketDeltas.map((d) => d.volume), marketDeltas.map((d) => d.count)],
    );
  }

  await writeQuarantine(client, consumerId, writes.quarantine);

  let qualityUpdated = 0;
  if (quality.length > 0) {
    // Older never overwrites newer: the WHERE makes a notice at or below the saved last_position a no-op.
    const res = await client.query(
      `INSERT INTO source_quality (consumer_id, scope, state, last_position, as_of)
       SELECT $1, scope, state, last_position, $5 FROM unnest($2::text[], $3::text[], $4::bigint[]) AS n(scope, state, last_position)
       ON CONFLICT (consumer_id, scope) DO UPDATE
          SET state = EXCLUDED.state, last_position = EXCLUDED.last_position, as_of = EXCLUDED.as_of, updated_at = now()
        WHERE source_quality.last_position < EXCLUDED.last_position`,
      [consumerId, quality.map((q) => q.scope), quality.map((q) => q.state), quality.map((q) => q.position), plan.checkpoint.position],
    );
    qualityUpdated = res.rowCount ?? 0;
  }

  let outboxed = 0;
  if (outbox.length > 0) {
    const res = await client.query(
      `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload)
       SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[])
       ON CONFLICT (consumer_id, idempotency_key) DO NOTHING`,
      [
        consumerId,
        outbox.map((o) => o.idempotencyKey),
        outbox.map((o) => o.eventId),
        outbox.map((o) => o.action),
        outbox.map((o) => JSON.stringify(o.payload)),
      ],
    );
    outboxed = res.rowCount ?? 0;
  }

  const { binding, checkpoint } = plan;
  await client.query(
    `INSERT INTO consumer_bindings (consumer_id, subscription_id, stream, history_id, filter, filter_hash, generation, mappings)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8::jsonb)
     ON CONFLICT (consumer_id) DO UPDATE
        SET subscription_id = EXCLUDED.subscription_id, stream = EXCLUDED.stream, history_id = EXCLUDED.history_id,
            filter = EXCLUDED.filter, filter_hash = EXCLUDED.filter_hash, generation = EXCLUDED.generation,
            mappings = EXCLUDED.mappings, updated_at = now()
      -- skip the write (and its dead tuple) when nothing changed, the common case
      WHERE (consumer_bindings.subscription_id, consumer_bindings.stream, consumer_bindings.history_id,
             consumer_bindings.filter, consumer_bindings.filter_hash, consumer_bindings.generation, consumer_bindings.mappings)
            IS DISTINCT FROM
            (EXCLUDED.subscription_id, EXCLUDED.stream, EXCLUDED.history_id, EXCLUDED.filter, EXCLUDED.filter_hash,
             EXCLUDED.generation, EXCLUDED.mappings)`,
    [
      plan.consumerId,
      binding.subscriptionId,
      binding.stream,
      binding.historyId,
      JSON.stringify(binding.filter),
      binding.filterHash,
      binding.generation,
      JSON.stringify(binding.mappings),
    ],
  );

  const updated = await client.query<{ version: number }>(
    `UPDATE checkpoints
        SET position = $2, token = $3, generation = $4, cut_position = $5, cut_reached = $6,
            version = version + 1, pending_start = NULL, updated_at = now()
      WHERE consumer_id = $1
      RETURNING version`,
    [plan.consumerId, checkpoint.position, checkpoint.token, checkpoint.generation, checkpoint.cutPosition, checkpoint.cutReached],
  );

  return {
    version: updated.rows[0]!.version,
    position: checkpoint.position,
    ...writes.counts,
    qualityUpdated,
    outboxed,
  };
}
