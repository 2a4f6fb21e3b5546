// Consecutive checkpoint plans of one session folded into the writes of one commit (docs/protocol.md §5, group commit):
// the rules of decideCommit on each plan in order, each seeing the rows read from the database plus the previous plans'
// own writes, exactly as if each had committed before the next was decided. The fold stops before the first plan that
// would not simply commit (a conflict, a held quarantine) or does not continue the previous one as the saved state
// would after its commit; what came before it commits, the stop lands exactly there.
import {
  decideNext,
  newestNoticePerScope,
  nothingDecided,
  validatePlanAgainstSaved,
  type CommitDecision,
  type CommitWrites,
  type ExecutionState,
  type ExistingRows,
  type QuarantineWrite,
  type RevisionWrite,
  type ReceiptWrite,
  type MarketDelta,
  type OutboxWrite,
} from './decide.js';
import { InvalidPlan } from './errors.js';
import { addExact, EXACT_ZERO, formatExact, parseExact, type ExactDecimal } from '../protocol/decimal.js';
import type { CheckpointPlan, QualityNotice } from '../protocol/types.js';

/** A quality notice as written: the newest per scope over the run, with the position of the checkpoint carrying it. */
export interface FoldedNotice extends QualityNotice {
  asOf: number;
  /** index of the plan that carried it */
  plan: number;
}

/** The writes of plans[0..count) together, and the per-plan figures of their results. */
export interface FoldedWrites {
  count: number;
  receipts: ReceiptWrite[];
  /** final state of every execution the run changed */
  executions: ExecutionState[];
  revisions: RevisionWrite[];
  marketDeltas: MarketDelta[];
  quarantine: QuarantineWrite[];
  outbox: OutboxWrite[];
  quality: FoldedNotice[];
  counts: CommitWrites['counts'][];
  outboxed: number[];
}

export interface Fold {
  writes: FoldedWrites;
  /**
   * Why the fold stopped before plans[writes.count], if it did: that plan's refusal (what one-at-a-time commits
   * would answer there), or `discontinuous` (it is not decided here: commit it on its own after the rest).
   */
  stop: Exclude<CommitDecision, { kind: 'committed' }> | { kind: 'discontinuous' } | null;
}

export function foldPlans(plans: readonly CheckpointPlan[], read: ExistingRows): Fold {
  const decided = nothingDecided();
  const deltas = new Map<string, { volume: ExactDecimal; count: number }>();
  const notices = new Map<string, FoldedNotice>();
  const out: FoldedWrites = {
    count: 0,
    receipts: [],
    executions: [],
    revisions: [],
    marketDeltas: [],
    quarantine: [],
    outbox: [],
    quality: [],
    counts: [],
    outboxed: [],
  };
  for (const [index, plan] of plans.entries()) {
    if (index > 0 && !continues(plans[index - 1]!, plan))
      return { writes: finish(out), stop: { kind: 'discontinuous' } };
    const decision = decideNext(plan, read, decided);
    if (decision.kind !== 'committed') {
      // The plan recorded part of itself in `decided` before it stopped: the writes are those of the plans before
      // it, decided again without it (a stop is rare; an undo record would cost every event).
      return { writes: foldPlans(plans.slice(0, index), read).writes, stop: decision };
    }
    const w = decision.writes;
    // Element by element: a checkpoint's thousands of receipts are more arguments than a spread call takes.
    for (const r of w.receipts) out.receipts.push(r);
    for (const q of w.quarantine) out.quarantine.push(q);
    out.revisions.push(...w.revisions);
    out.outbox.push(...w.outbox);
    for (const d of w.marketDeltas) {
      const entry = deltas.get(d.market) ?? { volume: EXACT_ZERO, count: 0 };
      entry.volume = addExact(entry.volume, parseExact(d.volume));
      entry.count += d.count;
      deltas.set(d.market, entry);
    }
    // The rule the database applies commit after commit: a notice replaces the saved one only if newer.
    for (const n of newestNoticePerScope(w.quality)) {
      const seen = notices.get(n.scope);
      if (seen === undefined || seen.position < n.position) {
        notices.set(n.scope, { ...n, asOf: plan.checkpoint.position, plan: index });
      }
    }
    out.counts.push(w.counts);
    out.outboxed.push(w.outbox.length);
    out.count += 1;
  }
  return { writes: finish(out), stop: null };

  function finish(writes: FoldedWrites): FoldedWrites {
    writes.executions = [...decided.executions.values()];
    // A market some plan touched keeps its row even when the run's deltas cancel out, as one commit at a time would.
    for (const [market, d] of deltas)
      writes.marketDeltas.push({ market, volume: formatExact(d.volume), count: d.count });
    writes.quality = [...notices.values()];
    return writes;
  }
}

/** A later plan of a run continues the previous one exactly as the saved state would after its commit. */
function continues(previous: CheckpointPlan, plan: CheckpointPlan): boolean {
  const { checkpoint } = previous;
  // The same position again with nothing new is the unchanged-checkpoint no-op: decided on its own.
  if (plan.checkpoint.position === checkpoint.position && plan.events.length === 0) return false;
  if (plan.consumerId !== previous.consumerId) return false;
  try {
    validatePlanAgainstSaved(plan, {
      position: checkpoint.position,
      generation: checkpoint.generation,
      pendingStart: null,
      abandoned: false,
    });
    return true;
  } catch (error) {
    if (error instanceof InvalidPlan) return false;
    throw error;
  }
}
