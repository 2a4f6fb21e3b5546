// Consecutive checkpoint plans of one session folded into the writes of one commit (docs/protocol.md §5, group commit):
// decideCommit on each plan in order, each seeing the rows read from the database plus the previous plans' own
// writes, exactly as if each had committed before the next was decided. The fold stops before the first plan that
// would not simply commit (a conflict, a held quarantine) or does not continue the previous one as the saved state
// would after its commit; what came before it commits, the stop lands exactly there.
import {
  decideCommit,
  newestNoticePerScope,
  validatePlanAgainstSaved,
  type CommitDecision,
  type CommitWrites,
  type ExecutionState,
  type ExistingQuarantine,
  type ExistingReceipt,
  type ExistingRows,
  type QuarantineWrite,
  type RevisionWrite,
  type ReceiptWrite,
  type MarketDelta,
  type OutboxWrite,
} from './decide.js';
import { InvalidPlan } from './errors.js';
import { addDecimal, formatDecimal, parseDecimal, type Decimal } from '../protocol/decimal.js';
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
  const receipts = new Map<string, ExistingReceipt>(read.receipts);
  const quarantine = new Map<string, ExistingQuarantine>(read.quarantine);
  const executions = new Map<string, ExecutionState>(read.executions);
  const existing: ExistingRows = { receipts, quarantine, executions };
  /** every execution the run changed, at its latest state, in the order each first changed */
  const changed = new Map<string, ExecutionState>();
  const deltas = new Map<string, { volume: Decimal; count: number }>();
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
  let stop: Fold['stop'] = null;
  for (const [index, plan] of plans.entries()) {
    if (index > 0 && !continues(plans[index - 1]!, plan)) {
      stop = { kind: 'discontinuous' };
      break;
    }
    const decision = decideCommit(plan, existing);
    if (decision.kind !== 'committed') {
      stop = decision;
      break;
    }
    const w = decision.writes;
    // What this plan wrote is what the later plans read as saved; the last plan has none after it.
    const readLater = index < plans.length - 1;
    for (const r of w.receipts) {
      // the same object, not a copy per event
      if (readLater) receipts.set(r.eventId, r);
      out.receipts.push(r);
    }
    for (const e of w.executions) {
      if (readLater) executions.set(e.entityId, e);
      changed.set(e.entityId, e);
    }
    for (const q of w.quarantine) {
      if (readLater) {
        quarantine.set(q.eventId, {
          contentHash: q.contentHash,
          position: q.position,
          ordinal: q.ordinal,
          disposition: 'terminal',
        });
      }
      out.quarantine.push(q);
    }
    out.revisions.push(...w.revisions);
    out.outbox.push(...w.outbox);
    for (const d of w.marketDeltas) {
      const entry = deltas.get(d.market) ?? { volume: { units: 0n, scale: 0 }, count: 0 };
      entry.volume = addDecimal(entry.volume, parseDecimal(d.volume));
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
  out.executions = [...changed.values()];
  // A market some plan touched keeps its row even when the run's deltas cancel out, as one commit at a time would.
  for (const [market, d] of deltas) out.marketDeltas.push({ market, volume: formatDecimal(d.volume), count: d.count });
  out.quality = [...notices.values()];
  return { writes: out, stop };
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
