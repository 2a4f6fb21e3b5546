// The domain rules of a commit, as a pure function: (plan, the rows the plan touches) → the rows to write and
// the outcome. No I/O, so every rule is property-tested without a database (test/unit/decide*.test.ts), and
// the same function serves the stream and the paginated source.
import { sameContent, type SavedContent } from '../protocol/canonical.js';
import { isSupportedKind, type TradeData } from '../protocol/codec.js';
import {
  addExact,
  EXACT_ZERO,
  formatExact,
  isZeroExact,
  mulExact,
  negateExact,
  parseExact,
  type ExactDecimal,
} from '../protocol/decimal.js';
import { journalOrderProblem } from '../protocol/pages.js';
import type { CheckpointPlan, QualityNotice, QuarantineReason, StagedEvent } from '../protocol/types.js';
import { InvalidPlan } from './errors.js';
import type { CommitConflict, HeldQuarantineItem } from './outcomes.js';
import { ALERT_SUPPRESSIONS, whaleSignal, type AlertSuppression, type WhaleSignalRules } from './whale-signal.js';

export type ReceiptOutcome = 'applied' | 'no_effect' | 'quarantined';
export type QuarantineDisposition = 'held' | 'terminal' | 'retry';

/** A saved receipt: its content hash, with the position and ordinal where the event was first applied. */
export interface ExistingReceipt extends SavedContent {
  outcome: ReceiptOutcome;
}

/** A saved quarantine record: its content hash, with the position and ordinal where the event was first met. */
export interface ExistingQuarantine extends SavedContent {
  disposition: QuarantineDisposition;
}

/** The saved state of an execution; money as decimal strings exactly as numeric returns them. */
export interface ExecutionState {
  entityId: string;
  revision: number;
  market: string;
  asset: string;
  side: string;
  price: string;
  size: string;
  notional: string;
  wallet: string;
  txHash: string;
  firstPosition: number;
  lastPosition: number;
  /** The event that produced this revision. */
  eventId: string;
}

/** What the read step found for the plan's eventIds and entityIds. */
export interface ExistingRows {
  receipts: ReadonlyMap<string, ExistingReceipt>;
  quarantine: ReadonlyMap<string, ExistingQuarantine>;
  executions: ReadonlyMap<string, ExecutionState>;
}

export interface ReceiptWrite {
  eventId: string;
  contentHash: string;
  position: number;
  ordinal: number;
  outcome: ReceiptOutcome;
}

/** A superseded revision: the state a correction replaced, with the event and position that had produced it. */
export interface RevisionWrite extends Omit<ExecutionState, 'firstPosition' | 'lastPosition'> {
  position: number;
}

export interface MarketDelta {
  market: string;
  /** Signed decimal string added to the market's volume. */
  volume: string;
  /** Signed change of the market's execution count. */
  count: number;
}

export interface QuarantineWrite extends HeldQuarantineItem {
  ordinal: number;
  contentHash: string;
  disposition: 'held' | 'terminal';
}

export interface OutboxWrite {
  idempotencyKey: string;
  eventId: string;
  action: 'whale_alert';
  payload: Record<string, unknown>;
  /** null: an alert to send; otherwise it is recorded as suppressed, for the audit, and never sent. */
  suppressedReason: AlertSuppression | null;
}

/** Whale alerts a plan wrote: queued to send, and suppressed by reason. */
export interface AlertCounts {
  queued: number;
  suppressed: Record<AlertSuppression, number>;
}

export function noAlerts(): AlertCounts {
  return { queued: 0, suppressed: { replay: 0, backfill: 0, late: 0, correction: 0 } };
}

/** The suppressed alerts of counts, as [reason, count] pairs with a count above zero. */
export function suppressedAlerts(counts: AlertCounts): [AlertSuppression, number][] {
  return ALERT_SUPPRESSIONS.filter((reason) => counts.suppressed[reason] > 0).map((r) => [r, counts.suppressed[r]]);
}

export interface CommitWrites {
  /** New receipts only (an event that already has one is a duplicate and writes nothing). */
  receipts: ReceiptWrite[];
  /** Final state of each execution the plan changed. */
  executions: ExecutionState[];
  /** Superseded revisions, in the order they were replaced. */
  revisions: RevisionWrite[];
  /** Non-zero deltas, one per market. */
  marketDeltas: MarketDelta[];
  /** Terminal records (new, or a released held one seen again). */
  quarantine: QuarantineWrite[];
  /** The newest notice per scope in the plan; the write keeps it only if newer than the saved one. */
  quality: QualityNotice[];
  outbox: OutboxWrite[];
  counts: { applied: number; duplicates: number; noEffect: number; quarantined: number; alerts: AlertCounts };
}

export type CommitDecision =
  | { kind: 'committed'; writes: CommitWrites }
  | CommitConflict
  /** Every held event of the plan (not only the first), so one operator decision covers them all. */
  | { kind: 'held_quarantine'; held: QuarantineWrite[] };

export const WHALE_ALERT = 'whale_alert' as const;

export function outboxKey(action: string, eventId: string): string {
  return `${action}:${eventId}`;
}

/** What the domain rules read of a plan: the stream's checkpoint plans and the page consumer's chunks both are one. */
export type DecidablePlan = Pick<CheckpointPlan, 'events' | 'qualityNotices' | 'quarantinePolicy' | 'actions'>;

/**
 * Folds the plan's events, in journal order, over the saved rows. Events of one plan see each other's effects
 * (a trade and its correction in the same checkpoint). Throws InvalidPlan for a supported kind staged without
 * its parsed trade (validatePlanShape rejects that first; this keeps the function total on its own).
 */
export function decideCommit(plan: DecidablePlan, existing: ExistingRows): CommitDecision {
  const decided = nothingDecided();
  const decision = decideNext(plan, existing, decided);
  if (decision.kind !== 'committed') return decision;
  return { kind: 'committed', writes: { ...decision.writes, executions: [...decided.executions.values()] } };
}

/**
 * What the plans a fold has decided so far wrote that a later plan reads, kept in one place for all of them rather
 * than in maps per plan merged into copies after each (those kept about a fifth more of every event alive at each
 * young-generation collection).
 */
export interface Decided {
  /** The content hash of every event the plans met, by eventId: the same eventId again is a duplicate or a conflict. */
  readonly seen: Map<string, string>;
  /** The latest state of every execution the plans changed, in the order each first changed. */
  readonly executions: Map<string, ExecutionState>;
}

export function nothingDecided(): Decided {
  return { seen: new Map(), executions: new Map() };
}

/** A plan's decision as decideNext returns it: the executions it changed are in the Decided it was given. */
export type PlanDecision =
  Exclude<CommitDecision, { kind: 'committed' }> | { kind: 'committed'; writes: Omit<CommitWrites, 'executions'> };

/**
 * decideCommit of the next plan of a fold, reading `existing` (the database's rows) under what the fold's earlier
 * plans decided, and recording its own events and executions in `decided`. A plan that does not commit leaves part
 * of itself recorded there: the fold decides again without it.
 */
export function decideNext(plan: DecidablePlan, existing: ExistingRows, decided: Decided): PlanDecision {
  const writes = new PlanWrites(plan, decided.executions);
  const { seen } = decided;
  for (const event of plan.events) {
    // Identity is what the event says, not where it was delivered: the same event at another position is a
    // duplicate too (docs/protocol.md §4).
    const saved = existing.receipts.get(event.eventId);
    const seenHash = seen.get(event.eventId);
    if (saved !== undefined || seenHash !== undefined) {
      if (saved ? !sameContent(saved, event) : seenHash !== event.contentHash) {
        const savedHash = saved?.contentHash ?? seenHash!;
        return { kind: 'conflict', eventId: event.eventId, savedHash, incomingHash: event.contentHash };
      }
      writes.counts.duplicates += 1;
      continue;
    }
    const record = existing.quarantine.get(event.eventId);
    if (record && !sameContent(record, event)) {
      return {
        kind: 'conflict',
        eventId: event.eventId,
        savedHash: record.contentHash,
        incomingHash: event.contentHash,
      };
    }
    seen.set(event.eventId, event.contentHash);

    if (!isSupportedKind(event.kind)) {
      writes.quarantineAs(event, record, 'unsupported_kind');
      continue;
    }
    const data = event.trade;
    if (data === null) throw new InvalidPlan(`event ${event.eventId}: ${event.kind} data is not a valid trade`);
    const before = decided.executions.get(event.entityId) ?? existing.executions.get(event.entityId);

    if (event.kind === 'correction' && before === undefined) {
      writes.quarantineAs(event, record, 'unknown_correction_target');
      continue;
    }
    // A trade of an entity that exists, or a correction at or below the saved revision: already reflected.
    if (before !== undefined && (event.kind === 'trade' || event.revision <= before.revision)) {
      writes.receipt(event, 'no_effect');
      writes.counts.noEffect += 1;
      continue;
    }
    writes.apply(event, data, before);
  }
  return writes.held.length > 0 ? { kind: 'held_quarantine', held: writes.held } : writes.committed();
}

/** The writes of one plan as decideCommit meets its events; its rules are read once per plan, not per event. */
class PlanWrites {
  readonly held: QuarantineWrite[] = [];
  readonly counts = { applied: 0, duplicates: 0, noEffect: 0, quarantined: 0, alerts: noAlerts() };
  private readonly receipts: ReceiptWrite[] = [];
  private readonly revisions: RevisionWrite[] = [];
  private readonly deltas = new Map<string, { volume: ExactDecimal; count: number }>();
  private readonly quarantine: QuarantineWrite[] = [];
  private readonly outbox: OutboxWrite[] = [];
  private readonly alertRules: WhaleSignalRules | null;
  private readonly terminalReasons: ReadonlySet<QuarantineReason>;

  /** `executions`: where the plan records the state of every entity it changes (Decided.executions). */
  constructor(
    private readonly plan: DecidablePlan,
    private readonly executions: Map<string, ExecutionState>,
  ) {
    const { whaleAlertMinNotional, ...signalRules } = plan.actions;
    this.alertRules =
      whaleAlertMinNotional === null ? null : { ...signalRules, threshold: parseExact(whaleAlertMinNotional) };
    this.terminalReasons = new Set(plan.quarantinePolicy.terminalReasons);
  }

  receipt(event: StagedEvent, outcome: ReceiptOutcome): void {
    this.receipts.push({
      eventId: event.eventId,
      contentHash: event.contentHash,
      position: event.position,
      ordinal: event.ordinal,
      outcome,
    });
  }

  quarantineAs(event: StagedEvent, record: ExistingQuarantine | undefined, reason: QuarantineReason): void {
    const item: QuarantineWrite = {
      eventId: event.eventId,
      entityId: event.entityId,
      kind: event.kind,
      position: event.position,
      ordinal: event.ordinal,
      contentHash: event.contentHash,
      reason,
      disposition: 'terminal',
    };
    // An operator's release_terminal, or a policy naming this reason: a durable outcome, go on.
    if (record?.disposition === 'terminal' || this.terminalReasons.has(reason)) {
      this.quarantine.push(item);
      this.receipt(event, 'quarantined');
      this.counts.quarantined += 1;
    } else {
      this.held.push({ ...item, disposition: 'held' });
    }
  }

  /** A trade, or a correction above the revision `before`: the new state, the volume moved, the whale signal. */
  apply(event: StagedEvent, data: TradeData, before: ExecutionState | undefined): void {
    const notional = mulExact(parseExact(data.price), parseExact(data.size));
    const beforeNotional = before ? parseExact(before.notional) : null;
    const after: ExecutionState = {
      entityId: event.entityId,
      revision: event.revision,
      market: data.market,
      asset: data.asset,
      side: data.side,
      price: data.price,
      size: data.size,
      notional: formatExact(notional),
      wallet: data.wallet,
      txHash: data.txHash,
      firstPosition: before?.firstPosition ?? event.position,
      lastPosition: event.position,
      eventId: event.eventId,
    };
    if (before) this.addDelta(before.market, negateExact(beforeNotional!), -1);
    this.addDelta(after.market, notional, 1);
    this.executions.set(event.entityId, after);
    if (before) this.revisions.push(superseded(before));
    const signal = this.alertRules === null ? null : whaleSignal(event, beforeNotional, notional, this.alertRules);
    if (signal !== null) {
      const suppressedReason = signal === 'alert' ? null : signal;
      if (suppressedReason === null) this.counts.alerts.queued += 1;
      else this.counts.alerts.suppressed[suppressedReason] += 1;
      this.outbox.push({
        idempotencyKey: outboxKey(WHALE_ALERT, event.eventId),
        eventId: event.eventId,
        action: WHALE_ALERT,
        payload: alertPayload(event, after),
        suppressedReason,
      });
    }
    this.receipt(event, 'applied');
    this.counts.applied += 1;
  }

  committed(): PlanDecision {
    const marketDeltas: MarketDelta[] = [];
    for (const [market, delta] of this.deltas) {
      if (isZeroExact(delta.volume) && delta.count === 0) continue;
      marketDeltas.push({ market, volume: formatExact(delta.volume), count: delta.count });
    }
    return {
      kind: 'committed',
      writes: {
        receipts: this.receipts,
        revisions: this.revisions,
        marketDeltas,
        quarantine: this.quarantine,
        quality: newestNoticePerScope(this.plan.qualityNotices),
        outbox: this.outbox,
        counts: this.counts,
      },
    };
  }

  private addDelta(market: string, amount: ExactDecimal, count: number): void {
    const entry = this.deltas.get(market);
    if (entry === undefined) this.deltas.set(market, { volume: addExact(EXACT_ZERO, amount), count });
    else {
      entry.volume = addExact(entry.volume, amount);
      entry.count += count;
    }
  }
}

// Field by field rather than by rest/spread, which copies through the generic (slow) path on every event.

/** The state a correction replaced, at the position that had produced it. */
function superseded(before: ExecutionState): RevisionWrite {
  return {
    entityId: before.entityId,
    revision: before.revision,
    market: before.market,
    asset: before.asset,
    side: before.side,
    price: before.price,
    size: before.size,
    notional: before.notional,
    wallet: before.wallet,
    txHash: before.txHash,
    eventId: before.eventId,
    position: before.lastPosition,
  };
}

/**
 * A whale alert's payload: the event's kind, position, delivery and observation time, then the execution's state
 * as applied.
 */
function alertPayload(event: StagedEvent, after: ExecutionState): Record<string, unknown> {
  return {
    kind: event.kind,
    position: event.position,
    delivery: event.delivery,
    observedAt: event.observedAt,
    entityId: after.entityId,
    revision: after.revision,
    market: after.market,
    asset: after.asset,
    side: after.side,
    price: after.price,
    size: after.size,
    notional: after.notional,
    wallet: after.wallet,
    txHash: after.txHash,
    eventId: after.eventId,
  };
}

/** Within a plan, the highest position wins per scope; at equal positions the later notice (journal order). */
export function newestNoticePerScope(notices: readonly QualityNotice[]): QualityNotice[] {
  const newest = new Map<string, QualityNotice>();
  for (const notice of notices) {
    const seen = newest.get(notice.scope);
    if (seen === undefined || notice.position >= seen.position) newest.set(notice.scope, notice);
  }
  return [...newest.values()];
}

/** The saved checkpoint a plan is validated against (the fenced row). */
export interface SavedCheckpoint {
  position: number | null;
  generation: number | null;
  pendingStart: 'live_cut' | 'from_floor' | null;
  abandoned: boolean;
}

/** Checks a plan on its own; throws InvalidPlan naming the first problem. Nothing has been written yet. */
export function validatePlanShape(plan: CheckpointPlan): void {
  const fail = (reason: string): never => {
    throw new InvalidPlan(reason);
  };
  const { checkpoint, binding } = plan;
  if (typeof checkpoint.token !== 'string' || checkpoint.token.length === 0) fail('the checkpoint token is empty');
  if (!Number.isSafeInteger(checkpoint.position) || checkpoint.position < 0)
    fail(`checkpoint position ${checkpoint.position} is not a non-negative integer`);
  if (binding.consumerId !== plan.consumerId)
    fail(`binding consumer ${binding.consumerId} is not the plan's consumer ${plan.consumerId}`);
  if (checkpoint.generation !== binding.generation) {
    fail(`checkpoint generation ${checkpoint.generation} differs from the binding generation ${binding.generation}`);
  }
  if (!Number.isSafeInteger(checkpoint.generation) || checkpoint.generation < 1)
    fail(`generation ${checkpoint.generation} is not a positive integer`);
  for (const event of plan.events) {
    if (
      !Number.isSafeInteger(event.position) ||
      event.position < 1 ||
      !Number.isSafeInteger(event.ordinal) ||
      event.ordinal < 1
    ) {
      fail(
        `event ${event.eventId} has position ${event.position} ordinal ${event.ordinal}: both must be positive integers`,
      );
    }
    if (event.position > checkpoint.position)
      fail(`event ${event.eventId} at ${event.position} is beyond the checkpoint position ${checkpoint.position}`);
    if (event.eventId.length === 0 || event.contentHash.length === 0)
      fail(`an event at ${event.position} has an empty eventId or content hash`);
    if (isSupportedKind(event.kind) && event.trade === null)
      fail(`event ${event.eventId}: ${event.kind} data is not a valid trade`);
  }
  const orderProblem = journalOrderProblem(plan.events);
  if (orderProblem) fail(`events out of journal order: ${orderProblem}`);
  for (const notice of plan.qualityNotices) {
    if (!Number.isSafeInteger(notice.position) || notice.position < 0 || notice.position > checkpoint.position) {
      fail(`quality notice for ${notice.scope} at ${notice.position} is outside 0..${checkpoint.position}`);
    }
  }
}

/**
 * Checks a plan against the saved checkpoint. Resume and rebind continue the saved journal (positions only
 * forward; generation equal, or +1 on rebind). An explicit start (live_cut/from_floor) is a new beginning and
 * may move the position anywhere — but only as the consumer's first commit or to consume the operator's
 * recorded decision; later checkpoints of that same session continue like a resume.
 */
export function validatePlanAgainstSaved(plan: CheckpointPlan, saved: SavedCheckpoint): void {
  const fail = (reason: string): never => {
    throw new InvalidPlan(reason);
  };
  if (saved.abandoned) fail(`consumer ${plan.consumerId} was abandoned by an operator decision`);
  const { checkpoint } = plan;
  const explicit = plan.startMode === 'live_cut' || plan.startMode === 'from_floor';
  if (explicit && saved.pendingStart !== null && saved.pendingStart !== plan.startMode) {
    fail(`explicit start ${plan.startMode} does not match the recorded decision ${saved.pendingStart}`);
  }
  if (explicit && (saved.position === null || saved.pendingStart !== null)) return;
  if (saved.pendingStart !== null)
    fail(`a ${saved.pendingStart} decision is pending: a ${plan.startMode} plan cannot commit before it`);
  if (saved.position === null || saved.generation === null)
    fail(`a ${plan.startMode} plan needs a saved checkpoint, and there is none`);
  const savedPosition = saved.position!;
  const savedGeneration = saved.generation!;
  const expectedGeneration =
    plan.startMode === 'rebind' && checkpoint.generation !== savedGeneration ? savedGeneration + 1 : savedGeneration;
  if (checkpoint.generation !== expectedGeneration) {
    fail(
      `${plan.startMode} plan has generation ${checkpoint.generation}; the saved generation is ${savedGeneration}` +
        (plan.startMode === 'rebind' ? ` (a rebind commits ${savedGeneration + 1})` : ''),
    );
  }
  if (checkpoint.position < savedPosition)
    fail(`checkpoint position ${checkpoint.position} is behind the saved position ${savedPosition}`);
  const early = plan.events.find((e) => e.position <= savedPosition);
  if (early) fail(`event ${early.eventId} at ${early.position} is not after the saved position ${savedPosition}`);
}
