// Operator decisions. Each writes its audit row in the same transaction as the state change it implies, under
// the consumer's progress row lock (its checkpoint; a page consumer's page progress), so a decision never
// interleaves with a commit.
import type pg from 'pg';
import type { QuarantineDisposition } from '../domain/decide.js';
import type { BindingDecision, DecisionAudit, GapDecision, QuarantineDecision } from '../domain/decisions.js';
import type { CommittedState, QuarantineReason } from '../protocol/types.js';
import { UnknownConsumer } from './errors.js';
import type { RawRow } from './rows.js';
import type { quarantine } from './schema.js';
import { lockCheckpoint } from './state.js';
import { inTransaction, toStorageFailure } from './transaction.js';

export interface DecisionInput<D extends GapDecision | BindingDecision | QuarantineDecision> extends DecisionAudit {
  consumerId: string;
  decision: D;
}

export async function insertAudit(
  client: pg.PoolClient,
  row: {
    consumerId: string;
    kind: 'gap' | 'binding' | 'quarantine' | 'alert';
    decision: string;
    actor: string;
    reason: string;
    replacedToken: string | null;
    details: unknown;
  },
): Promise<void> {
  await client.query(
    `INSERT INTO decisions (consumer_id, kind, decision, actor, reason, replaced_token, details)
     VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`,
    [
      row.consumerId,
      row.kind,
      row.decision,
      row.actor,
      row.reason,
      row.replacedToken,
      row.details === null ? null : JSON.stringify(row.details),
    ],
  );
}

/**
 * A start decision: from_floor / live_cut record the explicit start the next session makes (the saved token is
 * kept until that start's first commit replaces it); abandon stops the consumer for good; retry (binding only)
 * changes nothing but the audit. A state change bumps the version, fencing any attempt that loaded before it.
 */
async function recordStartDecision(
  pool: pg.Pool,
  kind: 'gap' | 'binding',
  input: DecisionInput<GapDecision | BindingDecision>,
): Promise<CommittedState> {
  const operation = kind === 'gap' ? 'recordGapDecision' : 'recordBindingDecision';
  return inTransaction(pool, operation, input.consumerId, async (client) => {
    const saved = await lockCheckpoint(client, input.consumerId);
    if (!saved) throw new UnknownConsumer(input.consumerId);
    await insertAudit(client, {
      consumerId: input.consumerId,
      kind,
      decision: input.decision,
      actor: input.actor,
      reason: input.reason,
      replacedToken: input.decision === 'retry' ? null : saved.token,
      details: null,
    });
    if (input.decision === 'retry') return saved;
    const res = await client.query<{ version: number }>(
      `UPDATE checkpoints
          SET pending_start = $2, abandoned = $3, version = version + 1, updated_at = now()
        WHERE consumer_id = $1
        RETURNING version`,
      [input.consumerId, input.decision === 'abandon' ? null : input.decision, input.decision === 'abandon'],
    );
    return {
      ...saved,
      version: res.rows[0]!.version,
      pendingStart: input.decision === 'abandon' ? null : input.decision,
      abandoned: input.decision === 'abandon',
      updatedAt: new Date().toISOString(),
    };
  });
}

export function recordGapDecision(pool: pg.Pool, input: DecisionInput<GapDecision>): Promise<CommittedState> {
  return recordStartDecision(pool, 'gap', input);
}

export function recordBindingDecision(pool: pg.Pool, input: DecisionInput<BindingDecision>): Promise<CommittedState> {
  return recordStartDecision(pool, 'binding', input);
}

/**
 * Locks whichever progress row the consumer has: the checkpoint of a stream consumer or the page progress of a
 * page consumer. Their commits take the same lock before reading quarantine records, so a decision never
 * interleaves with one. False when the consumer has neither.
 */
async function lockProgressRow(client: pg.PoolClient, consumerId: string): Promise<boolean> {
  if (await lockCheckpoint(client, consumerId)) return true;
  const page = await client.query('SELECT 1 FROM page_progress WHERE consumer_id = $1 FOR UPDATE', [consumerId]);
  return (page.rowCount ?? 0) > 0;
}

/**
 * Decides held quarantine records (all of the consumer's when eventIds is omitted): release_terminal makes
 * them a durable outcome (the next commit records their receipts and goes on); retry makes the next commit try
 * to apply them again. Works for stream and page consumers alike. Returns how many held records the decision covered.
 */
export async function resolveQuarantine(
  pool: pg.Pool,
  input: DecisionInput<QuarantineDecision> & { eventIds?: string[] },
): Promise<number> {
  return inTransaction(pool, 'resolveQuarantine', input.consumerId, async (client) => {
    if (!(await lockProgressRow(client, input.consumerId))) throw new UnknownConsumer(input.consumerId);
    const res = await client.query<{ event_id: string }>(
      `UPDATE quarantine
          SET disposition = $2, decided_by = $3, decided_at = now(), why = $4, updated_at = now()
        WHERE consumer_id = $1 AND disposition = 'held' AND ($5::text[] IS NULL OR event_id = ANY($5::text[]))
        RETURNING event_id`,
      [
        input.consumerId,
        input.decision === 'release_terminal' ? 'terminal' : 'retry',
        input.actor,
        input.reason,
        input.eventIds ?? null,
      ],
    );
    await insertAudit(client, {
      consumerId: input.consumerId,
      kind: 'quarantine',
      decision: input.decision,
      actor: input.actor,
      reason: input.reason,
      replacedToken: null,
      details: { eventIds: res.rows.map((r) => r.event_id).sort() },
    });
    return res.rowCount ?? 0;
  });
}

export interface QuarantineRecord {
  eventId: string;
  entityId: string;
  kind: string;
  position: number;
  ordinal: number;
  reason: QuarantineReason;
  disposition: QuarantineDisposition;
  decidedBy: string | null;
  decidedAt: string | null;
  why: string | null;
  createdAt: string;
}

/** Quarantine records in journal order; `disposition` narrows them (e.g. 'held' for the ones blocking). */
export async function listQuarantine(
  pool: pg.Pool,
  consumerId: string,
  opts: { disposition?: QuarantineDisposition; limit?: number } = {},
): Promise<QuarantineRecord[]> {
  try {
    const res = await pool.query<Omit<RawRow<typeof quarantine>, 'consumer_id' | 'content_hash' | 'updated_at'>>(
      `SELECT event_id, entity_id, kind, position, ordinal, reason, disposition, decided_by, decided_at, why, created_at
         FROM quarantine
        WHERE consumer_id = $1 AND ($2::text IS NULL OR disposition = $2)
        ORDER BY position, ordinal
        LIMIT $3`,
      [consumerId, opts.disposition ?? null, opts.limit ?? 1000],
    );
    return res.rows.map((r) => ({
      eventId: r.event_id,
      entityId: r.entity_id,
      kind: r.kind,
      position: Number(r.position),
      ordinal: r.ordinal,
      reason: r.reason,
      disposition: r.disposition,
      decidedBy: r.decided_by,
      decidedAt: r.decided_at?.toISOString() ?? null,
      why: r.why,
      createdAt: r.created_at.toISOString(),
    }));
  } catch (error) {
    throw toStorageFailure('listQuarantine', consumerId, error);
  }
}
