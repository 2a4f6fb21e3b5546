// The decisions a backfill (a page consumer run by backfillWorkflow) takes besides quarantine, which
// resolveQuarantine already covers for both kinds: a gap decision after the source refused the saved cursor,
// and the handover of the consumer id to the live stream consumer once the backfill reached the head. Each is
// one transaction under the consumer-kind lock and the page progress row, so it never interleaves with a chunk.
import type pg from 'pg';
import type { GapDecision } from '../domain/decisions.js';
import { insertAudit, type DecisionInput } from './decisions.js';
import { lockConsumerKind } from './state.js';
import { inTransaction } from './transaction.js';

/** The page consumer's progress as a decision leaves it. */
export interface PageDecisionView {
  resumeCursor: string | null;
  appliedPosition: number;
  version: number;
}

/** The consumer id has no page progress (never ran a backfill, or was handed over to the stream). */
export class UnknownPageConsumer extends Error {
  readonly code = 'unknown_page_consumer' as const;
  override readonly name = 'UnknownPageConsumer';
  constructor(readonly consumerId: string) {
    super(`consumer ${consumerId} has no page progress: it never ran a backfill or was handed over to the stream`);
  }
}

/** A page consumer has no live cut: the page source has no token for its head without reading up to it. */
export class UnsupportedPageDecision extends Error {
  readonly code = 'unsupported_page_decision' as const;
  override readonly name = 'UnsupportedPageDecision';
}

interface LockedProgress {
  resume_cursor: string | null;
  applied_position: string;
  version: number;
}

async function lockPageProgress(client: pg.PoolClient, consumerId: string): Promise<LockedProgress> {
  await lockConsumerKind(client, consumerId);
  const res = await client.query<LockedProgress>(
    'SELECT resume_cursor, applied_position, version FROM page_progress WHERE consumer_id = $1 FOR UPDATE',
    [consumerId],
  );
  if (!res.rows[0]) throw new UnknownPageConsumer(consumerId);
  return res.rows[0];
}

/**
 * from_floor: the next page is asked at the retention floor. The cursor, its history and the applied prefix are
 * cleared (after a rebuilt history the old positions mean nothing); events applied before are recognised by their
 * receipts in the chunk commit (no effect), the rest is applied. abandon changes nothing but the audit: the
 * workflow ends, and a later run would meet the same refusal. Both save the refused cursor in the audit row and
 * bump the version, fencing any run that loaded before.
 */
export async function recordPageGapDecision(
  pool: pg.Pool,
  input: DecisionInput<GapDecision>,
): Promise<PageDecisionView> {
  if (input.decision === 'live_cut') {
    throw new UnsupportedPageDecision(
      `a backfill has no live cut: decide from_floor or abandon (the live stream consumer can start at live_cut)`,
    );
  }
  return inTransaction(pool, 'recordPageGapDecision', input.consumerId, async (client) => {
    const saved = await lockPageProgress(client, input.consumerId);
    await insertAudit(client, {
      consumerId: input.consumerId,
      kind: 'gap',
      decision: input.decision,
      actor: input.actor,
      reason: input.reason,
      replacedToken: saved.resume_cursor,
      details: { source: 'pages', appliedPosition: Number(saved.applied_position) },
    });
    const res = await client.query<LockedProgress>(
      input.decision === 'from_floor'
        ? `UPDATE page_progress SET resume_cursor = NULL, history_id = NULL, applied_position = 0,
                  version = version + 1, updated_at = now()
            WHERE consumer_id = $1 RETURNING resume_cursor, applied_position, version`
        : `UPDATE page_progress SET version = version + 1, updated_at = now()
            WHERE consumer_id = $1 RETURNING resume_cursor, applied_position, version`,
      [input.consumerId],
    );
    const row = res.rows[0]!;
    return { resumeCursor: row.resume_cursor, appliedPosition: Number(row.applied_position), version: row.version };
  });
}

export type Handover =
  | { kind: 'handed_over'; appliedPosition: number }
  /** Already done by an earlier attempt of the same step. */
  | { kind: 'already_stream' }
  /** The page progress moved since the backfill saw it (another run): nothing changed. */
  | { kind: 'fenced'; actualVersion: number };

/**
 * Turns a caught-up page consumer into a stream consumer of the same id, atomically: the page progress row goes,
 * a checkpoint row comes with the explicit start `from_floor` recorded (the stream consumer's first session). The
 * stream replays the retained history: everything the backfill applied is recognised by its receipts (no effect),
 * everything after it is applied, so no event between the two is lost or applied twice.
 */
export async function handOverToStream(
  pool: pg.Pool,
  input: { consumerId: string; expectedVersion: number },
  /** Test cut point: runs inside the transaction, after its writes, before its commit. */
  beforeCommit?: (progress: { appliedPosition: number }) => void | Promise<void>,
): Promise<Handover> {
  return inTransaction(pool, 'handOverToStream', input.consumerId, async (client): Promise<Handover> => {
    await lockConsumerKind(client, input.consumerId);
    const progress = await client.query<LockedProgress & { events_applied: string }>(
      'SELECT resume_cursor, applied_position, version, events_applied FROM page_progress WHERE consumer_id = $1 FOR UPDATE',
      [input.consumerId],
    );
    const row = progress.rows[0];
    if (!row) {
      const stream = await client.query('SELECT 1 FROM checkpoints WHERE consumer_id = $1', [input.consumerId]);
      if (stream.rowCount) return { kind: 'already_stream' };
      throw new UnknownPageConsumer(input.consumerId);
    }
    if (row.version !== input.expectedVersion) return { kind: 'fenced', actualVersion: row.version };
    await client.query('DELETE FROM page_progress WHERE consumer_id = $1', [input.consumerId]);
    // The stream's totals go on from what the backfill applied.
    await client.query(
      `INSERT INTO checkpoints (consumer_id, pending_start, events_applied) VALUES ($1, 'from_floor', $2)`,
      [input.consumerId, row.events_applied],
    );
    const appliedPosition = Number(row.applied_position);
    await beforeCommit?.({ appliedPosition });
    return { kind: 'handed_over', appliedPosition };
  });
}
