// Bounded exponential backoff, shared by the stream's reconnects and the page source's repeated requests.

export interface Backoff {
  /** Retries after the first try without progress; past them the caller gives up. */
  maxAttempts: number;
  initialMs: number;
  maxMs: number;
}

/**
 * Delay before retry `attempt` (1-based): exponential from initialMs, capped at maxMs; a server's hint wins if longer.
 */
export function backoffDelay(backoff: Backoff, attempt: number, retryAfterMs?: number): number {
  const exponential = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.max(0, attempt - 1));
  return Math.max(exponential, retryAfterMs ?? 0);
}
