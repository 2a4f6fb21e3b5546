// Errors of the domain rules. Callers branch on `code`, never on messages. What a commit can answer (fenced,
// conflict, held quarantine) is an outcome, not an error: see outcomes.ts.

/** The plan itself is wrong (positions backwards, empty token, a decision pending, …): nothing was written. */
export class InvalidPlan extends Error {
  readonly code = 'invalid_plan' as const;
  override readonly name = 'InvalidPlan';
  constructor(readonly reason: string) {
    super(`invalid checkpoint plan: ${reason}`);
  }
}
