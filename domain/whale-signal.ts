// Whether an applied trade or correction is a trading signal (docs/protocol.md, "Whale alerts"). The one
// rule for every source: only a live delivery is a new signal; a replay, a backfill or a late observation
// changes state exactly the same and raises nothing, and the suppression is recorded so it can be audited.
import { compareExact, type ExactDecimal } from '../protocol/decimal.js';
import type { ActionRules, StagedEvent } from '../protocol/types.js';

/** Why a whale was not alerted; saved as the outbox row's `suppressed_reason`. */
export const ALERT_SUPPRESSIONS = ['replay', 'backfill', 'late', 'correction'] as const;
export type AlertSuppression = (typeof ALERT_SUPPRESSIONS)[number];

/** null: not a whale (below the threshold, or alerts are off); 'alert': send it; otherwise why not. */
export type WhaleSignal = 'alert' | AlertSuppression | null;

/** The rules as decide() applies them per event: the threshold parsed once per plan. */
export interface WhaleSignalRules extends Omit<ActionRules, 'whaleAlertMinNotional'> {
  threshold: ExactDecimal;
}

/**
 * `before`: the notional of the state a correction replaces (null for a new trade); `after`: the applied one.
 * A correction alerts only when it crosses the threshold: an execution that was already a whale is not a new
 * signal because one of its fields was revised.
 */
export function whaleSignal(
  event: Pick<StagedEvent, 'delivery' | 'receivedAt' | 'observedAt'>,
  before: ExactDecimal | null,
  after: ExactDecimal,
  rules: WhaleSignalRules,
): WhaleSignal {
  if (compareExact(after, rules.threshold) < 0) return null;
  if (before !== null && compareExact(before, rules.threshold) >= 0) return 'correction';
  if (event.delivery !== 'live') return rules.whaleAlertOnReplay ? 'alert' : event.delivery;
  return isLate(event, rules.whaleAlertMaxAgeMs) ? 'late' : 'alert';
}

/** Observed longer than the bound before it was received; a time that cannot be read is not shown to be fresh. */
function isLate(event: Pick<StagedEvent, 'receivedAt' | 'observedAt'>, maxAgeMs: number | null): boolean {
  if (maxAgeMs === null) return false;
  const observed = Date.parse(event.observedAt);
  return !(event.receivedAt - observed <= maxAgeMs);
}
