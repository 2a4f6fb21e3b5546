// Internal types shared by the rooms. They are the codec's output shapes, not wire frames: the database,
// the reducer and the workflows depend on these, never on the wire spelling.
import type { Mappings, QualityState, StartRequest, StreamFilter, TradeData } from './codec.js';

/** The subscription binding the token belongs to. Saved with every commit. */
export interface Binding {
  consumerId: string;
  subscriptionId: string;
  stream: string;
  historyId: string;
  filter: StreamFilter;
  filterHash: string;
  generation: number;
  mappings: Mappings;
}

/**
 * How an event reached the consumer: the stream batch's `deliveryMode`, or a page of the paginated history
 * source. It decides whether a whale alert is a trading signal (domain/whale-signal.ts), never the effect.
 */
export type EventDelivery = 'live' | 'replay' | 'backfill';

/** One source event, validated and staged in journal order (position, ordinal). */
export interface StagedEvent {
  position: number;
  ordinal: number;
  eventId: string;
  /** The wire kind as received; an unsupported kind is staged and then quarantined, never dropped. */
  kind: string;
  entityId: string;
  revision: number;
  observedAt: string;
  data: Record<string, unknown>;
  /** `data` of a supported kind, parsed once at staging; null for an unsupported kind (it is quarantined). */
  trade: TradeData | null;
  /** eventContentHash(event): the content identity, independent of the position and ordinal it came at. */
  contentHash: string;
  delivery: EventDelivery;
  /** When the consumer received the frame or page that carried the event (epoch ms): a live alert's age. */
  receivedAt: number;
}

/** A quality notice at a journal position; the cut snapshot contributes one per scope at its lastPosition. */
export interface QualityNotice {
  position: number;
  scope: string;
  state: QualityState;
}

export type QuarantineReason = 'unknown_correction_target' | 'unsupported_kind';
export const QUARANTINE_REASONS: readonly QuarantineReason[] = ['unknown_correction_target', 'unsupported_kind'];

export interface QuarantinePolicy {
  /** Reasons recorded as terminal at once (the consumer goes on); every other reason is held. */
  terminalReasons: readonly QuarantineReason[];
}

/** How the session that produced a plan was started. */
export type StartMode = StartRequest['mode'];

/** Everything one checkpoint commits, in one transaction (docs/protocol.md §5). */
export interface CheckpointPlan {
  consumerId: string;
  /** What this attempt loaded: the commit is a compare-and-swap on both. */
  fence: { leaseEpoch: number; version: number };
  /** The start mode of the session; explicit starts (live_cut, from_floor) may move the position anywhere. */
  startMode: StartMode;
  binding: Binding;
  checkpoint: {
    position: number;
    token: string;
    generation: number;
    cutPosition: number;
    /** true once this checkpoint's position reached the session's cut */
    cutReached: boolean;
  };
  /** Journal order. */
  events: StagedEvent[];
  /** Journal order; includes the cut snapshot's notices on the checkpoint that reaches the cut. */
  qualityNotices: QualityNotice[];
  quarantinePolicy: QuarantinePolicy;
  /** Rules that write external actions to the outbox inside the commit (never performed there). */
  actions: ActionRules;
}

export interface ActionRules {
  /** A trade (or correction) whose notional is at least this decimal writes a `whale_alert` outbox row; null: none. */
  whaleAlertMinNotional: string | null;
  /** A live event observed longer than this before it was received raises no alert (late); null: no bound. */
  whaleAlertMaxAgeMs: number | null;
  /** Replayed and backfilled events alert as if live (the whole retained history alerts); off by default. */
  whaleAlertOnReplay: boolean;
}

/** The default age bound of a live whale alert (WHALE_ALERT_MAX_AGE). */
export const DEFAULT_WHALE_ALERT_MAX_AGE_MS = 5 * 60_000;

/** Whale alerts at or above `minNotional` (null: none), live only, within the default age bound. */
export function whaleAlertRules(minNotional: string | null, options: Partial<ActionRules> = {}): ActionRules {
  return {
    whaleAlertMinNotional: minNotional,
    whaleAlertMaxAgeMs: DEFAULT_WHALE_ALERT_MAX_AGE_MS,
    whaleAlertOnReplay: false,
    ...options,
  };
}

/** No external actions. */
export const NO_ACTIONS: ActionRules = whaleAlertRules(null);

/** The durable state a run resumes from. The database is the authority. */
export interface CommittedState {
  consumerId: string;
  leaseEpoch: number;
  version: number;
  /** null until the first checkpoint commits */
  position: number | null;
  token: string | null;
  generation: number | null;
  binding: Binding | null;
  cutPosition: number | null;
  cutReached: boolean;
  /** An explicit start recorded by an operator decision and not yet consumed by a commit. */
  pendingStart: 'live_cut' | 'from_floor' | null;
  abandoned: boolean;
  updatedAt: string | null;
  /** The consumer's lifetime totals as saved with the checkpoint (absent where a caller built the state itself). */
  totals?: CheckpointTotals;
}

/** Checkpoints committed and events they applied over a consumer's life, as the checkpoint row counts them. */
export interface CheckpointTotals {
  checkpointsCommitted: number;
  eventsApplied: number;
}
