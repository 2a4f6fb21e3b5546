// Reads a consumer's whole saved state in a comparable form, so tests can assert "nothing changed" exactly.
import type pg from 'pg';

export interface ExecutionRow {
  entityId: string;
  revision: number;
  market: string;
  price: string;
  size: string;
  notional: string;
}

export interface SavedState {
  checkpoint: {
    position: number | null;
    token: string | null;
    generation: number | null;
    version: number;
    leaseEpoch: number;
  } | null;
  receipts: { eventId: string; outcome: string }[];
  executions: ExecutionRow[];
  /** every applied revision of every execution, superseded and current */
  revisions: { entityId: string; revision: number; eventId: string; notional: string }[];
  /** market → "volume/count", volume normalised (trailing zeros stripped) */
  volumes: Record<string, string>;
  quarantine: { eventId: string; disposition: string; reason: string }[];
  quality: Record<string, string>;
  outbox: string[];
}

/** numeric::text may carry trailing zeros ("50.00"); compare amounts, not scales. */
export function norm(decimal: string): string {
  if (!decimal.includes('.')) return decimal;
  const trimmed = decimal.replace(/0+$/, '').replace(/\.$/, '');
  return trimmed === '-0' ? '0' : trimmed;
}

export async function dumpState(pool: pg.Pool, consumerId: string): Promise<SavedState> {
  const q = async <T extends pg.QueryResultRow>(sql: string) => (await pool.query<T>(sql, [consumerId])).rows;
  const [checkpoint] = await q<{
    position: string | null;
    token: string | null;
    generation: number | null;
    version: number;
    lease_epoch: number;
  }>('SELECT position, token, generation, version, lease_epoch FROM checkpoints WHERE consumer_id = $1');
  return {
    checkpoint: checkpoint
      ? {
          position: checkpoint.position === null ? null : Number(checkpoint.position),
          token: checkpoint.token,
          generation: checkpoint.generation,
          version: checkpoint.version,
          leaseEpoch: checkpoint.lease_epoch,
        }
      : null,
    receipts: (
      await q<{ event_id: string; outcome: string }>(
        'SELECT event_id, outcome FROM event_receipts WHERE consumer_id = $1 ORDER BY event_id',
      )
    ).map((r) => ({ eventId: r.event_id, outcome: r.outcome })),
    executions: (
      await q<{ entity_id: string; revision: number; market: string; price: string; size: string; notional: string }>(
        'SELECT entity_id, revision, market, price::text, size::text, notional::text FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
      )
    ).map((r) => ({
      entityId: r.entity_id,
      revision: r.revision,
      market: r.market,
      price: norm(r.price),
      size: norm(r.size),
      notional: norm(r.notional),
    })),
    revisions: (
      await q<{ entity_id: string; revision: number; event_id: string; notional: string }>(
        // The full history: superseded revisions plus each execution's current one.
        `SELECT entity_id, revision, event_id, notional::text FROM execution_revisions WHERE consumer_id = $1
         UNION ALL
         SELECT entity_id, revision, event_id, notional::text FROM executions WHERE consumer_id = $1
         ORDER BY entity_id, revision`,
      )
    ).map((r) => ({ entityId: r.entity_id, revision: r.revision, eventId: r.event_id, notional: norm(r.notional) })),
    volumes: Object.fromEntries(
      (
        await q<{ market: string; volume: string; execution_count: number }>(
          'SELECT market, volume::text, execution_count FROM market_volumes WHERE consumer_id = $1 ORDER BY market',
        )
      )
        .filter((r) => r.execution_count !== 0 || norm(r.volume) !== '0')
        .map((r) => [r.market, `${norm(r.volume)}/${r.execution_count}`]),
    ),
    quarantine: (
      await q<{ event_id: string; disposition: string; reason: string }>(
        'SELECT event_id, disposition, reason FROM quarantine WHERE consumer_id = $1 ORDER BY event_id',
      )
    ).map((r) => ({ eventId: r.event_id, disposition: r.disposition, reason: r.reason })),
    quality: Object.fromEntries(
      (
        await q<{ scope: string; state: string; last_position: string }>(
          'SELECT scope, state, last_position FROM source_quality WHERE consumer_id = $1 ORDER BY scope',
        )
      ).map((r) => [r.scope, `${r.state}@${r.last_position}`]),
    ),
    outbox: (
      await q<{ idempotency_key: string }>(
        'SELECT idempotency_key FROM outbox WHERE consumer_id = $1 ORDER BY idempotency_key',
      )
    ).map((r) => r.idempotency_key),
  };
}
