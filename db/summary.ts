// A consumer's state at a glance, for the CLI and the workflow's Current Details.
import type pg from 'pg';
import { formatDecimal, parseDecimal } from '../protocol/decimal.js';
import type { CommittedState } from '../protocol/types.js';
import { loadCommitted } from './state.js';
import { toStorageFailure } from './transaction.js';

export interface DecisionSummary {
  kind: 'gap' | 'binding' | 'quarantine';
  decision: string;
  actor: string;
  reason: string;
  replacedToken: string | null;
  decidedAt: string;
}

export interface ConsumerSummary {
  state: CommittedState;
  executions: number;
  markets: number;
  /** Sum of every market's volume, a decimal string ("0" when none). */
  totalVolume: string;
  heldQuarantine: number;
  pendingOutbox: number;
  lastDecision?: DecisionSummary;
}

export async function consumerSummary(pool: pg.Pool, consumerId: string): Promise<ConsumerSummary | null> {
  const state = await loadCommitted(pool, consumerId);
  if (!state) return null;
  try {
    // One round trip of scalar subqueries; each is an index-only count on the consumer's key prefix.
    const res = await pool.query<{
      executions: string;
      markets: string;
      total_volume: string;
      held: string;
      pending_outbox: string;
    }>(
      `SELECT (SELECT count(*) FROM executions WHERE consumer_id = $1) AS executions,
              (SELECT count(*) FROM market_volumes WHERE consumer_id = $1 AND execution_count > 0) AS markets,
              (SELECT coalesce(sum(volume), 0)::text FROM market_volumes WHERE consumer_id = $1) AS total_volume,
              (SELECT count(*) FROM quarantine WHERE consumer_id = $1 AND disposition = 'held') AS held,
              (SELECT count(*) FROM outbox WHERE consumer_id = $1 AND status IN ('pending', 'claimed')) AS pending_outbox`,
      [consumerId],
    );
    const last = await pool.query<{
      kind: DecisionSummary['kind'];
      decision: string;
      actor: string;
      reason: string;
      replaced_token: string | null;
      decided_at: Date;
    }>(
      `SELECT kind, decision, actor, reason, replaced_token, decided_at FROM decisions
        WHERE consumer_id = $1 ORDER BY id DESC LIMIT 1`,
      [consumerId],
    );
    const counts = res.rows[0]!;
    const decision = last.rows[0];
    return {
      state,
      executions: Number(counts.executions),
      markets: Number(counts.markets),
      // numeric::text keeps its scale's trailing zeros ("12.500"): print equal amounts equally.
      totalVolume: formatDecimal(parseDecimal(counts.total_volume)),
      heldQuarantine: Number(counts.held),
      pendingOutbox: Number(counts.pending_outbox),
      ...(decision && {
        lastDecision: {
          kind: decision.kind,
          decision: decision.decision,
          actor: decision.actor,
          reason: decision.reason,
          replacedToken: decision.replaced_token,
          decidedAt: decision.decided_at.toISOString(),
        },
      }),
    };
  } catch (error) {
    throw toStorageFailure('consumerSummary', consumerId, error);
  }
}
