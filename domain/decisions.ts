// The words of an operator decision. Each list is the one spelling: the CLI, the workflow's validators, the
// activities and the database derive their types and choices from it.

/** What an operator decides when the stream cannot resume from the saved token. */
export const GAP_DECISIONS = ['from_floor', 'live_cut', 'abandon'] as const;
export type GapDecision = (typeof GAP_DECISIONS)[number];

/** What an operator decides when the saved binding cannot be resumed; retry changes nothing but the audit. */
export const BINDING_DECISIONS = ['retry', 'from_floor', 'live_cut', 'abandon'] as const;
export type BindingDecision = (typeof BINDING_DECISIONS)[number];

/** What an operator decides for held quarantine records. */
export const QUARANTINE_DECISIONS = ['release_terminal', 'retry'] as const;
export type QuarantineDecision = (typeof QUARANTINE_DECISIONS)[number];

/** Who decided and why: every decision lands in the audit with both. */
export interface DecisionAudit {
  actor: string;
  reason: string;
}
