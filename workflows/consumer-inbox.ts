// What the workflows' signal and update handlers accept, held for their loops to take: pause and resume
// requests, decisions with the tickets their update callers wait on, and (the stream consumer's) rebind
// requests. DecisionInbox is what the stream consumer and the backfill share; ConsumerInbox adds bindings and
// rebinds. Pure (no Temporal workflow APIs): the workflows' handlers are thin calls into these classes, and the
// effects they need (stop the running activity, publish the state, log) come in as callbacks, so they are
// unit-tested directly.
import { ApplicationFailure } from '@temporalio/common';
import type { DecisionAudit } from '../activities/types.js';
import type { ConsumerState } from './consumer-state.js';
import { RUNNING_PHASES } from './consumer-state.js';
import type {
  BindingResolution,
  ConsumerPhase,
  ConsumerStatus,
  GapResolution,
  QuarantineResolution,
  RebindRejection,
  RebindRequest,
} from './definitions.js';
import {
  InvalidOperatorInput,
  parseAudit,
  parseBindingResolution,
  parseGapResolution,
  parseQuarantineResolution,
  parseRebindRequest,
} from './validation.js';

/** A decision waiting for the loop, and the ticket an update handler waits on for its result. */
export interface Pending<T> {
  ticket: number;
  value: T;
}

export interface InboxEffects {
  /** Stops the running activity at its next boundary (a checkpoint, a page chunk). */
  interruptRun(): void;
  /** Shows the state in search attributes and Current Details. */
  publish(): void;
  warn(message: string, attributes: Record<string, unknown>): void;
}

/** A rebind signal the consumer refused, and whom to tell (the requesting rebindWorkflow, if any). */
export interface RefusedRebind {
  replyTo: string | null;
  rejection: RebindRejection;
}

export const SUPERSEDED = 'superseded by a later decision before it was applied';

/** What an inbox reads and writes of its workflow's state. */
export interface InboxState<Phase extends string, Status> {
  readonly consumerId: string;
  phase: Phase;
  lastError: string | null;
  noteError(message: string): void;
  status(): Status;
}

/** The phases in which the shared decisions are taken. */
type DecisionPhase = 'awaiting_gap_decision' | 'awaiting_quarantine_decision';

/** Pause, resume, gap and quarantine decisions and their tickets: what every workflow of a consumer accepts. */
export class DecisionInbox<Phase extends string, Status> {
  pause: DecisionAudit | null = null;
  resume: DecisionAudit | null = null;
  gap: Pending<GapResolution> | null = null;
  quarantine: Pending<QuarantineResolution> | null = null;
  /** Bumped by a pause or an accepted rebind: ends a backoff timer early. */
  wakeups = 0;
  protected nextTicket = 1;
  /** Tickets an update handler waits on (signals have nobody to answer). */
  private readonly awaited = new Set<number>();
  /** ticket → null (applied) or the error that kept it from being applied */
  private readonly results = new Map<number, string | null>();

  constructor(
    protected readonly state: InboxState<Phase, Status>,
    protected readonly effects: InboxEffects,
  ) {}

  // ---- tickets ------------------------------------------------------------------------------------

  /** An update handler waits on this ticket: its result is kept until taken. */
  expectResult(ticket: number): void {
    this.awaited.add(ticket);
  }

  hasResult(ticket: number): boolean {
    return this.results.has(ticket);
  }

  /** The awaited result: the status when the decision was applied, else a DecisionNotApplied failure. */
  takeResult(ticket: number): Status {
    const error = this.results.get(ticket);
    this.results.delete(ticket);
    if (error) throw ApplicationFailure.nonRetryable(error, 'DecisionNotApplied');
    return this.state.status();
  }

  /** Answers the ticket's waiting update, if any: null when applied, else why not. */
  settle(ticket: number, error: string | null): void {
    if (this.awaited.delete(ticket)) this.results.set(ticket, error);
  }

  // ---- validation ---------------------------------------------------------------------------------

  requirePhase(phase: Phase | DecisionPhase, what: string): void {
    if (this.state.phase !== phase) {
      throw new InvalidOperatorInput(
        `consumer ${this.state.consumerId} is ${this.state.phase}, not ${phase}: no ${what} to take now`,
      );
    }
  }

  validateGap(raw: GapResolution): void {
    parseGapResolution(raw);
    this.requirePhase('awaiting_gap_decision', 'gap decision');
  }

  validateQuarantine(raw: QuarantineResolution): void {
    parseQuarantineResolution(raw);
    this.requirePhase('awaiting_quarantine_decision', 'quarantine decision');
  }

  // ---- accepting ----------------------------------------------------------------------------------

  /** A decision replaces an unapplied earlier one of its kind; that one's update fails as superseded. */
  acceptGap(raw: GapResolution): number {
    const value = parseGapResolution(raw);
    this.requirePhase('awaiting_gap_decision', 'gap decision');
    this.supersede(this.gap);
    this.gap = { ticket: this.nextTicket++, value };
    return this.gap.ticket;
  }

  acceptQuarantine(raw: QuarantineResolution): number {
    const value = parseQuarantineResolution(raw);
    this.requirePhase('awaiting_quarantine_decision', 'quarantine decision');
    this.supersede(this.quarantine);
    this.quarantine = { ticket: this.nextTicket++, value };
    return this.quarantine.ticket;
  }

  requestPause(audit: DecisionAudit): void {
    this.pause = parseAudit(audit);
    this.wakeups += 1;
    this.effects.interruptRun();
  }

  requestResume(audit: DecisionAudit): void {
    this.resume = parseAudit(audit);
    this.pause = null;
  }

  /** Signals cannot be rejected: an invalid one is ignored and shows up as the last error. */
  ignoreInvalid(what: string, apply: () => unknown): void {
    try {
      apply();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.state.noteError(`ignored ${what} signal: ${message}`);
      this.effects.warn('ignored invalid signal', { consumerId: this.state.consumerId, signal: what, error: message });
      this.effects.publish();
    }
  }

  // ---- taking (the loop) --------------------------------------------------------------------------

  takeResume(): DecisionAudit | null {
    const request = this.resume;
    this.resume = null;
    return request;
  }

  takeGap(): Pending<GapResolution> | null {
    const pending = this.gap;
    this.gap = null;
    return pending;
  }

  takeQuarantine(): Pending<QuarantineResolution> | null {
    const pending = this.quarantine;
    this.quarantine = null;
    return pending;
  }

  protected supersede(previous: Pending<unknown> | null): void {
    if (previous) this.settle(previous.ticket, SUPERSEDED);
  }
}

/** The stream consumer's inbox: the shared decisions plus binding decisions and rebinds. */
export class ConsumerInbox extends DecisionInbox<ConsumerPhase, ConsumerStatus> {
  binding: Pending<BindingResolution> | null = null;

  constructor(
    protected override readonly state: ConsumerState,
    effects: InboxEffects,
  ) {
    super(state, effects);
  }

  validateBinding(raw: BindingResolution): void {
    parseBindingResolution(raw);
    this.requirePhase('awaiting_binding_decision', 'binding decision');
  }

  validateRebind(raw: RebindRequest): void {
    parseRebindRequest(raw);
    const refusal = this.rebindRefusal();
    if (refusal) throw new InvalidOperatorInput(refusal);
  }

  /** Why a rebind cannot be taken now, or null when it can. */
  rebindRefusal(): string | null {
    const { state } = this;
    const id = state.consumerId;
    if (state.phase === 'rebinding' || state.pendingRebind) return `consumer ${id} is already rebinding`;
    if (!RUNNING_PHASES.includes(state.phase)) {
      return `consumer ${id} is ${state.phase}${state.stop ? ` (${state.stop.reason})` : ''}: resolve that first`;
    }
    if (!state.committed?.token) return `consumer ${id} has no committed checkpoint yet: nothing to rebind from`;
    if (state.start.mode !== 'resume')
      return `consumer ${id} has an explicit ${state.start.mode} start pending its first commit`;
    return null;
  }

  acceptBinding(raw: BindingResolution): number {
    const value = parseBindingResolution(raw);
    this.requirePhase('awaiting_binding_decision', 'binding decision');
    this.supersede(this.binding);
    this.binding = { ticket: this.nextTicket++, value };
    return this.binding.ticket;
  }

  acceptRebind(raw: RebindRequest): RebindRequest {
    const request = parseRebindRequest(raw);
    const refusal = this.rebindRefusal();
    if (refusal) throw new InvalidOperatorInput(refusal);
    this.state.pendingRebind = { filter: request.filter, requestedBy: request.requestedBy };
    this.wakeups += 1;
    // The running lease stops at its next checkpoint boundary; the loop then starts the rebind.
    this.effects.interruptRun();
    this.effects.publish();
    return request;
  }

  /** A rebind signal cannot be rejected: a refusal shows as the last error and goes back to `replyTo`. */
  rebindBySignal(raw: RebindRequest): RefusedRebind | null {
    try {
      this.acceptRebind(raw);
      return null;
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      this.state.noteError(`refused rebind: ${reason}`);
      this.effects.publish();
      const replyTo = typeof raw?.replyTo === 'string' && raw.replyTo !== '' ? raw.replyTo : null;
      return { replyTo, rejection: { consumerId: this.state.consumerId, phase: this.state.phase, reason } };
    }
  }

  takeBinding(): Pending<BindingResolution> | null {
    const pending = this.binding;
    this.binding = null;
    return pending;
  }
}
