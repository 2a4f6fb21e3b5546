// Bounded exponential backoff, one rule for the stream's reconnects, the page source's repeated requests and the
// workflows' durable timers (a fault's backoff, a backfill's wait at the head). Pure.

export interface Backoff {
  /** Retries after the first try without progress; past them the caller gives up. */
  maxAttempts: number;
  initialMs: number;
  maxMs: number;
}

/** The delay after `rounds` waits in a row: initialMs, doubled per round, capped at maxMs. */
export function growingDelay(bounds: Pick<Backoff, 'initialMs' | 'maxMs'>, rounds: number): number {
  return Math.min(bounds.maxMs, bounds.initialMs * 2 ** Math.max(0, rounds));
}

/**
 * Delay before retry `attempt` (1-based): exponential from initialMs, capped at maxMs; a server's hint wins if longer.
 */
export function backoffDelay(backoff: Backoff, attempt: number, retryAfterMs?: number): number {
  return Math.max(growingDelay(backoff, attempt - 1), retryAfterMs ?? 0);
}
