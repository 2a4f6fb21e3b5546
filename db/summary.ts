// A consumer's state at a glance, for the CLI and the workflow's Current Details.
import type pg from 'pg';
import { formatDecimal, parseDecimal } from '../protocol/decimal.js';
import type { CommittedState } from '../protocol/types.js';
import { summarizeOutbox, type OutboxSummary } from './outbox.js';
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
  /** The whale alerts waiting to be sent (pending or being sent): `alerts.pending`, kept for readers of the JSON. */
  pendingOutbox: number;
  /** The consumer's whale alerts: waiting, failed for good (dead), and the age of the oldest waiting one. */
  alerts: OutboxSummary;
  lastDecision?: DecisionSummary;
}

export async function consumerSummary(pool: pg.Pool, consumerId: string): Promise<ConsumerSummary | null> {
  const state = await loadCommitted(pool, consumerId);
  if (!state) return null;
  try {
    // One round trip of scalar subqueries over the small tables. The executions are counted from their markets'
    // counts, which every commit keeps (a correction that moves an execution moves its count): a count(*) over the
    // consumer's executions grows with its history (3 s at 40 million, bench/results/age.md).
    const res = await pool.query<{
      executions: string;
      markets: string;
      total_volume: string;
      held: string;
    }>(
      `SELECT (SELECT coalesce(sum(execution_count), 0) FROM market_volumes WHERE consumer_id = $1) AS executions,
              (SELECT count(*) FROM market_volumes WHERE consumer_id = $1 AND execution_count > 0) AS markets,
              (SELECT coalesce(sum(volume), 0)::text FROM market_volumes WHERE consumer_id = $1) AS total_volume,
              (SELECT count(*) FROM quarantine WHERE consumer_id = $1 AND disposition = 'held') AS held`,
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
    // The same figures the streaming run reports to Current Details: one definition of pending, dead and oldest.
    const alerts = await summarizeOutbox(pool, consumerId);
    const counts = res.rows[0]!;
    const decision = last.rows[0];
    return {
      state,
      executions: Number(counts.executions),
      markets: Number(counts.markets),
      // numeric::text keeps its scale's trailing zeros ("12.500"): print equal amounts equally.
      totalVolume: formatDecimal(parseDecimal(counts.total_volume)),
      heldQuarantine: Number(counts.held),
      pendingOutbox: alerts.pending,
      alerts,
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
